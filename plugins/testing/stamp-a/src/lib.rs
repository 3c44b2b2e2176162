//! Test plugin `stamp-a`: see `../src/unruly.rs`.
const STAMP: &str = "a";
const ALWAYS: Option<&str> = None;
include!("../../src/unruly.rs");
