//! NVRTC through weft-cuda: compiling, the compiler's errors, the on-disk cache. NVRTC
//! needs no GPU; where it cannot be loaded the tests say so and pass, unless
//! WEFT_REQUIRE_NVRTC=1 (scripts/test sets it, after installing NVRTC).

use std::path::PathBuf;

use weft_cuda::nvrtc::{compile_with_cache, present_or_skip};
use weft_cuda::{CompileOptions, CudaError};

const KERNEL: &str = r#"
extern "C" __global__ void triple(unsigned int* out, unsigned int n) {
  unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = i * SCALE;
}
"#;

fn opts(arch: (u32, u32), scale: u32) -> CompileOptions {
    CompileOptions {
        arch,
        cubin: false,
        defines: vec![("SCALE".to_string(), scale.to_string())],
        extra: Vec::new(),
    }
}

fn scratch(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("weft-cuda-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

#[test]
fn compiles_for_each_architecture() {
    if !present_or_skip() {
        return;
    }
    for (arch, target) in [((8, 0), ".target sm_80"), ((9, 0), ".target sm_90")] {
        let c = compile_with_cache("triple.cu", KERNEL, &[], &opts(arch, 3), None).unwrap();
        let ptx = String::from_utf8_lossy(&c.image);
        assert!(ptx.contains(target), "{target} missing");
        assert!(ptx.contains(".entry triple("), "entry point missing");
        assert_eq!(
            c.image.last(),
            Some(&0),
            "PTX must be NUL-terminated for cuModuleLoadData"
        );
        assert!(!c.from_cache);
    }
}

#[test]
fn a_compile_error_carries_the_log() {
    if !present_or_skip() {
        return;
    }
    let bad = "extern \"C\" __global__ void k() { undeclared_thing = 1; }";
    let e = compile_with_cache("broken.cu", bad, &[], &opts((9, 0), 1), None).unwrap_err();
    assert!(matches!(e, CudaError::Compile { .. }), "{e:?}");
    let text = e.to_string();
    assert!(
        text.contains("broken.cu") && text.contains("undeclared_thing"),
        "{text}"
    );
}

#[test]
fn headers_are_found_by_their_include_name() {
    if !present_or_skip() {
        return;
    }
    let src = "#include \"scale.h\"\nextern \"C\" __global__ void k(int* o) { *o = FROM_HEADER; }";
    let c = compile_with_cache(
        "with_header.cu",
        src,
        &[("scale.h", "#define FROM_HEADER 42\n")],
        &opts((9, 0), 1),
        None,
    )
    .unwrap();
    assert!(String::from_utf8_lossy(&c.image).contains("42"));
}

#[test]
fn the_cache_hits_misses_and_survives_damage() {
    if !present_or_skip() {
        return;
    }
    let dir = scratch("cache");
    let first = compile_with_cache("triple.cu", KERNEL, &[], &opts((9, 0), 3), Some(&dir)).unwrap();
    assert!(!first.from_cache);
    let second =
        compile_with_cache("triple.cu", KERNEL, &[], &opts((9, 0), 3), Some(&dir)).unwrap();
    assert!(second.from_cache);
    assert_eq!(first.image, second.image);
    // Another definition is another program.
    let other = compile_with_cache("triple.cu", KERNEL, &[], &opts((9, 0), 5), Some(&dir)).unwrap();
    assert!(!other.from_cache);
    assert_ne!(other.image, first.image);
    // A damaged file is ignored and replaced.
    for f in std::fs::read_dir(&dir).unwrap() {
        std::fs::write(f.unwrap().path(), b"garbage").unwrap();
    }
    let again = compile_with_cache("triple.cu", KERNEL, &[], &opts((9, 0), 3), Some(&dir)).unwrap();
    assert!(!again.from_cache);
    assert_eq!(again.image, first.image);
    // A cache that cannot be written is only a warning.
    let blocked = dir.join("file-not-dir");
    std::fs::write(&blocked, b"x").unwrap();
    let c = compile_with_cache("triple.cu", KERNEL, &[], &opts((9, 0), 3), Some(&blocked)).unwrap();
    assert!(!c.from_cache);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn machine_code_is_an_elf_image_cached_apart_from_ptx() {
    if !present_or_skip() {
        return;
    }
    let dir = scratch("cubin");
    let cubin = CompileOptions {
        cubin: true,
        ..opts((9, 0), 3)
    };
    let first = compile_with_cache("triple.cu", KERNEL, &[], &cubin, Some(&dir)).unwrap();
    assert!(first.image.starts_with(b"\x7fELF"), "not an ELF image");
    assert!(!first.from_cache);
    let second = compile_with_cache("triple.cu", KERNEL, &[], &cubin, Some(&dir)).unwrap();
    assert!(second.from_cache);
    assert_eq!(first.image, second.image);
    // The PTX of the same source is another cache entry, not the CUBIN.
    let ptx = compile_with_cache("triple.cu", KERNEL, &[], &opts((9, 0), 3), Some(&dir)).unwrap();
    assert!(!ptx.from_cache);
    assert!(ptx.image.starts_with(b"//"));
    let _ = std::fs::remove_dir_all(&dir);
}
