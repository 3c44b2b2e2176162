//! The default policies the binary carries (embedded when it is built, from
//! `target/plugins/`), served when the host is given no plugin folder: the
//! binary alone runs the same policies as the folder next to the build.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Where a built-in policy says it comes from, in place of a folder.
pub const FOLDER: &str = "(built in)";

const EMBEDDED: [(&str, &[u8]); 4] = [
    (
        "status",
        include_bytes!(concat!(env!("OUT_DIR"), "/builtin/status.wasm")),
    ),
    (
        "failover",
        include_bytes!(concat!(env!("OUT_DIR"), "/builtin/failover.wasm")),
    ),
    (
        "admission",
        include_bytes!(concat!(env!("OUT_DIR"), "/builtin/admission.wasm")),
    ),
    (
        "lifecycle",
        include_bytes!(concat!(env!("OUT_DIR"), "/builtin/lifecycle.wasm")),
    ),
];

/// The built-in policies by name, with the path they are shown under
/// (`(built in)/status.wasm`); none when the build embedded none.
pub fn files() -> BTreeMap<String, PathBuf> {
    EMBEDDED
        .iter()
        .filter(|(_, bytes)| !bytes.is_empty())
        .map(|(name, _)| {
            (
                name.to_string(),
                Path::new(FOLDER).join(format!("{name}.wasm")),
            )
        })
        .collect()
}

/// The plugin folder used when none is named: `target/plugins` (the
/// folder `cargo xtask plugins` builds) where it exists; else the built-in
/// policies serve.
pub fn default_folder() -> Option<PathBuf> {
    Some(PathBuf::from("target/plugins")).filter(|d| d.is_dir())
}

/// A built-in policy's component.
pub fn bytes(name: &str) -> Option<&'static [u8]> {
    EMBEDDED
        .iter()
        .find(|(n, bytes)| *n == name && !bytes.is_empty())
        .map(|(_, bytes)| *bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_built_in_policy_is_a_component_shown_under_its_name() {
        for (name, path) in files() {
            assert_eq!(path, Path::new("(built in)").join(format!("{name}.wasm")));
            assert!(
                crate::plugins::is_component(bytes(&name).unwrap()),
                "{name}"
            );
        }
        assert_eq!(bytes("nothing"), None);
    }
}
