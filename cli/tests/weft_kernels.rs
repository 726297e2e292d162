//! `weft kernels` end to end: it fills a kernel cache with no GPU, and a second run finds
//! everything there. Needs NVRTC (scripts/test installs it; WEFT_REQUIRE_NVRTC=1 turns a
//! missing NVRTC into a failure instead of a skip).

use std::process::{Command, Output};

use weft_cuda::nvrtc::present_or_skip;

fn kernels(cache: &std::path::Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_weft"))
        .arg("kernels")
        .args(args)
        .env("WEFT_CACHE_DIR", cache)
        .env_remove("WEFT_KERNEL_CACHE")
        .output()
        .expect("run weft kernels")
}

#[test]
fn fills_the_cache_for_an_architecture_then_finds_it_there() {
    if !present_or_skip() {
        return;
    }
    let cache = std::env::temp_dir().join(format!("weft-kernels-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&cache);
    let first = kernels(&cache, &["--arch", "9.0", "--dtype", "int8"]);
    let text = String::from_utf8_lossy(&first.stdout);
    assert!(first.status.success(), "{first:?}");
    // The ring, one-/two-shot and NVLS modules of one type.
    assert!(
        text.contains("sm_90: 3 modules, 3 compiled now, 0 already cached"),
        "{text}"
    );
    let cubins = std::fs::read_dir(&cache)
        .unwrap()
        .filter_map(Result::ok)
        .filter(|f| f.path().extension().is_some_and(|e| e == "cubin"))
        .count();
    assert_eq!(cubins, 3);
    let again = kernels(&cache, &["--arch", "9.0", "--dtype", "int8"]);
    let text = String::from_utf8_lossy(&again.stdout);
    assert!(
        text.contains("sm_90: 3 modules, 0 compiled now, 3 already cached"),
        "{text}"
    );
    let _ = std::fs::remove_dir_all(&cache);
}

#[test]
fn refuses_what_it_cannot_parse_with_the_choices() {
    let cache = std::env::temp_dir().join(format!("weft-kernels-bad-{}", std::process::id()));
    let bad_arch = kernels(&cache, &["--arch", "nine"]);
    assert_eq!(bad_arch.status.code(), Some(2));
    let err = String::from_utf8_lossy(&bad_arch.stderr);
    assert!(err.contains("--arch nine: expected MAJOR.MINOR"), "{err}");
    let bad_type = kernels(&cache, &["--dtype", "complex"]);
    assert_eq!(bad_type.status.code(), Some(2));
    let err = String::from_utf8_lossy(&bad_type.stderr);
    assert!(
        err.contains("--dtype complex: one of") && err.contains("bfloat16"),
        "{err}"
    );
}
