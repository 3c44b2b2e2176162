//! Test plugin `hog`: see `../src/unruly.rs`.
const STAMP: &str = "hog";
const ALWAYS: Option<&str> = Some("hog");
include!("../../src/unruly.rs");
