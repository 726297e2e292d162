//! The committed headers (`capi/include/weft.h`, `kernels/include/weft_abi.h`) match what the
//! pinned cbindgen generates from the current sources (scripts/check-header.sh), so a C ABI
//! change without regenerated headers fails `cargo test` and not only CI. Skipped, with a message, where cbindgen 0.29.2 is not
//! installed.

use std::path::Path;
use std::process::Command;

const PINNED: &str = "cbindgen 0.29.2";

#[test]
fn committed_header_matches_sources() {
    let cbindgen = std::env::var("CBINDGEN").unwrap_or_else(|_| "cbindgen".to_owned());
    let version = Command::new(&cbindgen)
        .arg("--version")
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned());
    match version.as_deref() {
        Some(PINNED) => {}
        other => {
            println!(
                "header_fresh: SKIPPED: needs {PINNED}, found {other:?} \
                 (cargo install cbindgen --version 0.29.2 --locked)"
            );
            return;
        }
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("tests/ has a parent");
    let out = Command::new("bash")
        .arg(root.join("scripts/check-header.sh"))
        .env("CBINDGEN", &cbindgen)
        .output()
        .expect("run scripts/check-header.sh");
    assert!(
        out.status.success(),
        "a committed header is stale; run scripts/gen-header.sh and commit it:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}
