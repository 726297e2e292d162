//! Embeds a kernel bundle when `WEFT_KERNEL_BUNDLE` names one at build time (see
//! `src/bundle.rs`); otherwise an empty one, and kernels compile with NVRTC at run time.

use std::path::PathBuf;

fn main() {
    println!("cargo:rerun-if-env-changed=WEFT_KERNEL_BUNDLE");
    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    let target = out.join("kernels.bundle");
    // `0` is the run-time "no bundle": a shell that exports it builds without one too.
    match std::env::var_os("WEFT_KERNEL_BUNDLE").filter(|p| !p.is_empty() && p != "0") {
        Some(path) => {
            let path = PathBuf::from(path);
            if path.is_relative() {
                panic!(
                    "WEFT_KERNEL_BUNDLE={}: give an absolute path (a build script runs in \
                     its crate's folder, not where cargo was started)",
                    path.display()
                );
            }
            println!("cargo:rerun-if-changed={}", path.display());
            if let Err(e) = std::fs::copy(&path, &target) {
                panic!(
                    "WEFT_KERNEL_BUNDLE={}: {e} (make one with scripts/build-kernel-bundle.sh, \
                     or unset it to build without embedded kernels)",
                    path.display()
                );
            }
        }
        None => std::fs::write(&target, []).expect("write an empty kernel bundle into OUT_DIR"),
    }
}
