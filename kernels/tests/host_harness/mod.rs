//! Shared by the tests that compile a kernel header for the host (`*_host.cpp` beside them)
//! and compare its answers with weft_core, the reference.

use std::path::PathBuf;
use std::process::Command;

/// Compiles `tests/<name>_host.cpp` with the system C++ compiler (`CXX`, else `c++`) into a
/// temporary executable and returns its path.
pub fn build(name: &str) -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests");
    let source = format!("{name}_host.cpp");
    let out = std::env::temp_dir().join(format!(
        "weft-{}-{}",
        name.replace('_', "-"),
        std::process::id()
    ));
    let cxx = std::env::var("CXX").unwrap_or_else(|_| "c++".to_string());
    let status = Command::new(&cxx)
        .args(["-std=c++17", "-O1", "-Wall", "-Werror", "-o"])
        .arg(&out)
        .arg(dir.join(&source))
        .status()
        .unwrap_or_else(|e| {
            panic!("running {cxx} (a C++ compiler is needed: apt-get install g++, or scripts/test): {e}")
        });
    assert!(status.success(), "{cxx} failed on {source}");
    out
}
