//! The kernel bundle as `compile` uses it (its own test binary: the bundle is read once per
//! process, from `WEFT_KERNEL_BUNDLE`): a module the bundle holds comes from it without
//! NVRTC being loaded at all, under the key of the NVRTC version that built the bundle; a
//! module it lacks, and a compile past the bundle, go to NVRTC.

use weft_cuda::CompileOptions;
use weft_cuda::bundle::KernelBundle;
use weft_cuda::nvrtc::{cache_key, compile_with_cache, compile_without_bundle, present_or_skip};

const KERNEL: &str = r#"
extern "C" __global__ void triple(unsigned int* out, unsigned int n) {
  unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = i * SCALE;
}
"#;

/// No NVRTC has this version: a hit under it proves NVRTC was not asked.
const BUNDLE_NVRTC: (i32, i32) = (99, 7);

fn opts(scale: u32) -> CompileOptions {
    opts_for((9, 0), scale)
}

fn opts_for(arch: (u32, u32), scale: u32) -> CompileOptions {
    CompileOptions {
        arch,
        cubin: true,
        defines: vec![("SCALE".to_string(), scale.to_string())],
        extra: Vec::new(),
    }
}

/// The smallest ELF the cache's completeness check takes: a 64-bit little-endian header
/// whose (empty) section table lies within the file, and a marker after it.
fn fake_cubin() -> Vec<u8> {
    let mut elf = vec![0u8; 0x40];
    elf[..4].copy_from_slice(b"\x7fELF");
    elf[4] = 2; // 64-bit
    elf[5] = 1; // little-endian
    elf[0x28..0x30].copy_from_slice(&0x40u64.to_le_bytes()); // section table offset
    elf[0x3a..0x3c].copy_from_slice(&0x40u16.to_le_bytes()); // section header size
    elf.extend(b"from the bundle");
    elf
}

#[test]
fn bundled_modules_need_no_nvrtc_and_the_rest_compile() {
    let key = cache_key(KERNEL, &[], &opts(3).nvrtc_options(), BUNDLE_NVRTC);
    let bytes = KernelBundle::write(
        BUNDLE_NVRTC,
        &[(format!("triple_cu-{key}.cubin"), fake_cubin())],
    );
    let path = std::env::temp_dir().join(format!("weft-bundle-{}.bundle", std::process::id()));
    std::fs::write(&path, bytes).unwrap();
    // SAFETY: this test binary has one test, and nothing has read the environment yet.
    unsafe { std::env::set_var("WEFT_KERNEL_BUNDLE", &path) };

    let hit = compile_with_cache("triple.cu", KERNEL, &[], &opts(3), None).unwrap();
    assert!(hit.from_bundle && hit.from_cache);
    assert_eq!(hit.image, fake_cubin());
    assert_eq!(hit.cache_name, format!("triple_cu-{key}.cubin"));
    // A later minor revision of the same major architecture runs sm_90's code.
    let later = compile_with_cache("triple.cu", KERNEL, &[], &opts_for((9, 9), 3), None).unwrap();
    assert!(later.from_bundle);
    assert_eq!(later.image, fake_cubin());

    if present_or_skip() {
        // Another definition: another key, not in the bundle.
        let miss = compile_with_cache("triple.cu", KERNEL, &[], &opts(4), None).unwrap();
        assert!(!miss.from_bundle && !miss.from_cache);
        assert!(miss.image.starts_with(b"\x7fELF") && miss.image != fake_cubin());
        // Past the bundle (its image refused by the driver): this machine's NVRTC.
        let again = compile_without_bundle("triple.cu", KERNEL, &[], &opts(3)).unwrap();
        assert!(!again.from_bundle);
        assert_ne!(again.image, fake_cubin());
    }
    let _ = std::fs::remove_file(&path);
}
