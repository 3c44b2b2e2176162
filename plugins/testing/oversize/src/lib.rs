//! Test plugin `oversize`: see `../src/unruly.rs`.
const STAMP: &str = "oversize";
const ALWAYS: Option<&str> = Some("oversize");
include!("../../src/unruly.rs");
