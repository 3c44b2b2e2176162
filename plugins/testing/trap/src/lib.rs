//! Test plugin `trap`: see `../src/unruly.rs`.
const STAMP: &str = "trap";
const ALWAYS: Option<&str> = Some("trap");
include!("../../src/unruly.rs");
