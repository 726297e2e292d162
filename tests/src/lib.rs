//! Shared helpers for weft cross-crate tests.
//!
//! - [`elf`]: the symbols a shared library exports (its ELF `.dynsym`).
//! - [`workspace_root`], [`profile_dir`]: where the sources and this test's build are.

use std::path::{Path, PathBuf};

pub mod elf;

/// The workspace's root folder (the parent of `tests/`).
pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("tests/ is inside the workspace")
        .to_path_buf()
}

/// `<target>/<profile>` of the running test executable (which lives in
/// `<target>/<profile>/deps`): where cargo put the libraries the test builds.
pub fn profile_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("path of the test executable");
    exe.parent()
        .and_then(Path::parent)
        .expect("test executable under <target>/<profile>/deps")
        .to_path_buf()
}
