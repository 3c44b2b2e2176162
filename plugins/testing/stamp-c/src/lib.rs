//! Test plugin `stamp-c`: see `../src/unruly.rs`.
const STAMP: &str = "c";
const ALWAYS: Option<&str> = None;
include!("../../src/unruly.rs");
