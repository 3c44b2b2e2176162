//! Test plugin `stamp-b`: see `../src/unruly.rs`.
const STAMP: &str = "b";
const ALWAYS: Option<&str> = None;
include!("../../src/unruly.rs");
