//! Test plugin `spin`: see `../src/unruly.rs`.
const STAMP: &str = "spin";
const ALWAYS: Option<&str> = Some("spin");
include!("../../src/unruly.rs");
