//! Embeds the default policies (`target/plugins/{status,failover,admission,lifecycle}.wasm`,
//! built by `cargo xtask plugins`; another folder by `VERDICT_BUILTIN_POLICIES`)
//! into the binary, which serves them when no plugin folder is given. A
//! build without them embeds none and says so.

use std::path::PathBuf;

const WORLDS: [&str; 4] = ["status", "failover", "admission", "lifecycle"];

fn main() {
    println!("cargo:rerun-if-env-changed=VERDICT_BUILTIN_POLICIES");
    let dir = match std::env::var_os("VERDICT_BUILTIN_POLICIES") {
        Some(dir) => PathBuf::from(dir),
        None => PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").expect("set by cargo"))
            .join("../target/plugins"),
    };
    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("set by cargo")).join("builtin");
    std::fs::create_dir_all(&out).expect("OUT_DIR is writable");
    let mut missing = Vec::new();
    for world in WORLDS {
        let from = dir.join(format!("{world}.wasm"));
        println!("cargo:rerun-if-changed={}", from.display());
        let bytes = std::fs::read(&from).unwrap_or_else(|_| {
            missing.push(world);
            Vec::new()
        });
        std::fs::write(out.join(format!("{world}.wasm")), bytes).expect("OUT_DIR is writable");
    }
    if !missing.is_empty() {
        println!(
            "cargo:warning=the default policies {} are not in {}: the binary carries none of them (build them with `cargo xtask plugins`)",
            missing.join(", "),
            dir.display()
        );
    }
}
