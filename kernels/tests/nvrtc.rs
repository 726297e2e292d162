//! Every kernel module (one per element type, SIMPLE and LL) compiles with NVRTC for sm_80
//! and sm_90, with every entry point the driver looks up; the fp8 modules compile for sm_89 and sm_90,
//! through NVRTC's assembler too (their conversions are inline PTX, which NVRTC otherwise
//! passes through unchecked), and are refused, with an error naming the reason, for sm_86. NVRTC needs no GPU; where
//! it cannot be loaded the tests say so and pass, unless WEFT_REQUIRE_NVRTC=1 (scripts/test
//! sets it).
//!
//! `WEFT_TEST_KERNEL_CACHE=DIR` (scripts/install-deps sets it to a folder under
//! ~/.cache/weft-deps) keeps what these tests compiled, keyed by the source, every header,
//! every option and NVRTC's version, as weft's kernel cache does: a later run on that machine
//! checks the same PTX without compiling it again, unless a kernel source or header changed
//! (these modules take tens of minutes of CPU on a 2-core machine). weft-cuda keeps only
//! modules that compiled without a warning, so the no-warning checks below still see every
//! warning.

use weft_core::abi::{DataType, RedOp};
use weft_cuda::CompileOptions;
use weft_cuda::nvrtc::{Compiled, compile_with_cache, present_or_skip};

/// Where compiled modules are kept between runs (`WEFT_TEST_KERNEL_CACHE`), if anywhere.
fn cache() -> Option<std::path::PathBuf> {
    std::env::var_os("WEFT_TEST_KERNEL_CACHE")
        .filter(|d| !d.is_empty())
        .map(std::path::PathBuf::from)
}

fn compile(
    dtype: DataType,
    arch: (u32, u32),
    extra: &[String],
) -> Result<Compiled, weft_cuda::CudaError> {
    let opts = CompileOptions {
        arch,
        cubin: false,
        defines: weft_kernels::defines(dtype),
        extra: extra.to_vec(),
    };
    compile_with_cache(
        weft_kernels::COLLECTIVES_NAME,
        weft_kernels::COLLECTIVES,
        weft_kernels::HEADERS,
        &opts,
        cache().as_deref(),
    )
}

fn check_module(dtype: DataType, arch: (u32, u32), extra: &[String]) -> String {
    let c = compile(dtype, arch, extra)
        .unwrap_or_else(|e| panic!("{dtype:?} for sm_{}{}: {e}", arch.0, arch.1));
    let ptx = String::from_utf8_lossy(&c.image).into_owned();
    assert!(ptx.contains(&format!(".target sm_{}{}", arch.0, arch.1)));
    for op in RedOp::ALL {
        for entry in [
            weft_kernels::ring_entry(*op),
            weft_kernels::ring_ll_entry(*op),
            weft_kernels::gathered_entry(*op),
        ] {
            assert!(
                ptx.contains(&format!(".entry {entry}(")),
                "{dtype:?}: {entry} missing"
            );
        }
    }
    assert!(ptx.contains(&format!(".entry {}(", weft_kernels::P2P_ENTRY)));
    // The FIFO protocol's ordering is in the instructions: release stores of the
    // counters, acquire loads when polling, volatile loads of received slots; and LL's
    // line pairs, each stored and polled as two 8-byte words in one vector access.
    for needle in [
        "st.release.sys.global.u64",
        "ld.acquire.sys.global.u64",
        "ld.volatile.global.v4.u32",
        "%globaltimer",
        "st.volatile.global.v2.u64",
        "ld.volatile.global.v2.u64",
    ] {
        assert!(ptx.contains(needle), "{dtype:?}: no {needle}");
    }
    // Compiled without warnings (a warning in kernel code is usually a bug).
    assert!(c.log.trim().is_empty(), "{dtype:?}: NVRTC says:\n{}", c.log);
    ptx
}

#[test]
fn every_module_compiles_for_ampere_and_hopper() {
    if !present_or_skip() {
        return;
    }
    for arch in [(8, 0), (9, 0)] {
        for &dtype in DataType::ALL {
            if weft_kernels::compiles_for(dtype, arch) {
                check_module(dtype, arch, &[]);
            }
        }
    }
}

#[test]
fn fp8_modules_use_the_hardware_conversions_from_sm_89() {
    if !present_or_skip() {
        return;
    }
    for arch in [(8, 9), (9, 0)] {
        for (dtype, format) in [
            (DataType::Float8E4M3, "e4m3x2"),
            (DataType::Float8E5M2, "e5m2x2"),
        ] {
            // A real architecture after the virtual one (the last one counts): NVRTC then
            // assembles the PTX with ptxas, which checks the inline conversions.
            let assemble = [format!("--gpu-architecture=sm_{}{}", arch.0, arch.1)];
            let ptx = check_module(dtype, arch, &assemble);
            // NCCL's semantics: widen to binary16, one binary16 operation, narrow to
            // nearest even with saturation.
            for needle in [
                format!("cvt.rn.f16x2.{format}"),
                format!("cvt.rn.satfinite.{format}.f16x2"),
                "add.rn.f16".to_string(),
                "mul.rn.f16".to_string(),
            ] {
                assert!(
                    ptx.contains(&needle),
                    "{dtype:?} sm_{}{}: no {needle}",
                    arch.0,
                    arch.1
                );
            }
        }
    }
}

#[test]
fn fp8_modules_are_refused_before_sm_89() {
    if !present_or_skip() {
        return;
    }
    for &dtype in DataType::ALL.iter().filter(|d| d.is_fp8()) {
        assert!(!weft_kernels::compiles_for(dtype, (8, 6)));
        let e = compile(dtype, (8, 6), &[])
            .err()
            .unwrap_or_else(|| panic!("{dtype:?} compiled for sm_86"));
        let text = e.to_string();
        assert!(
            text.contains("fp8 kernels (WEFT_DTYPE 10, 11) need compute capability 8.9 or newer"),
            "{dtype:?} for sm_86: {text}"
        );
    }
}

fn compile_source(
    name: &str,
    text: &str,
    dtype: DataType,
    arch: (u32, u32),
    extra: &[String],
) -> String {
    let opts = CompileOptions {
        arch,
        cubin: false,
        defines: weft_kernels::defines(dtype),
        extra: extra.to_vec(),
    };
    let c = compile_with_cache(name, text, weft_kernels::HEADERS, &opts, cache().as_deref())
        .unwrap_or_else(|e| panic!("{name} {dtype:?} for sm_{}{}: {e}", arch.0, arch.1));
    assert!(
        c.log.trim().is_empty(),
        "{name} {dtype:?}: NVRTC says:\n{}",
        c.log
    );
    String::from_utf8_lossy(&c.image).into_owned()
}

#[test]
fn direct_modules_compile_for_hopper() {
    if !present_or_skip() {
        return;
    }
    for &dtype in DataType::ALL {
        let ptx = compile_source(
            weft_kernels::DIRECT_NAME,
            weft_kernels::DIRECT,
            dtype,
            (9, 0),
            &[],
        );
        for op in RedOp::ALL {
            let entry = weft_kernels::direct_entry(*op);
            assert!(
                ptx.contains(&format!(".entry {entry}(")),
                "{dtype:?}: {entry} missing"
            );
        }
        // The barrier's flags: release stores to peers, acquire polls, the clock for the
        // deadline; peers' windows read past L1.
        for needle in [
            "st.release.sys.global.u64",
            "ld.acquire.sys.global.u64",
            "ld.volatile.global.v4.u32",
            "%globaltimer",
        ] {
            assert!(ptx.contains(needle), "{dtype:?}: no {needle}");
        }
    }
}

/// The NVLS modules, assembled for sm_90 by NVRTC's ptxas (`--gpu-architecture=sm_90` after
/// the virtual one): ptxas checks every inline `multimem` instruction, which NVRTC alone
/// would pass through unchecked. Their PTX must hold `multimem.ld_reduce` exactly for the
/// types the hardware reduces, and `multimem.st` for all.
#[test]
fn nvls_modules_assemble_for_sm_90_with_multimem() {
    if !present_or_skip() {
        return;
    }
    let assemble = ["--gpu-architecture=sm_90".to_string()];
    for &dtype in DataType::ALL {
        let ptx = compile_source(
            weft_kernels::NVLS_NAME,
            weft_kernels::NVLS,
            dtype,
            (9, 0),
            &assemble,
        );
        for op in RedOp::ALL {
            let entry = weft_kernels::nvls_entry(*op);
            assert!(
                ptx.contains(&format!(".entry {entry}(")),
                "{dtype:?}: {entry} missing"
            );
        }
        assert!(
            ptx.contains("multimem.st.global.v4.f32"),
            "{dtype:?}: no multimem.st"
        );
        assert!(
            ptx.contains("multimem.st.release.sys.global.u64"),
            "{dtype:?}: no multimem counter store"
        );
        // Unicast and multicast addresses alias the same memory: the multicast form orders
        // accesses through them with fence.proxy.alias.
        assert!(
            ptx.contains("fence.proxy.alias"),
            "{dtype:?}: no fence.proxy.alias"
        );
        let reduces = RedOp::ALL
            .iter()
            .any(|op| weft_kernels::nvls_multimem_reduces(dtype, *op));
        assert_eq!(
            ptx.contains("multimem.ld_reduce"),
            reduces,
            "{dtype:?}: multimem.ld_reduce present: {}, expected {reduces}",
            ptx.contains("multimem.ld_reduce")
        );
        let expect: &[&str] = match dtype {
            DataType::Float32 => &["multimem.ld_reduce.relaxed.sys.global.add.v4.f32"],
            DataType::Float64 => &["multimem.ld_reduce.relaxed.sys.global.add.f64"],
            DataType::Float16 => &[
                "multimem.ld_reduce.relaxed.sys.global.add.acc::f32.v4.f16x2",
                "multimem.ld_reduce.relaxed.sys.global.min.v4.f16x2",
                "multimem.ld_reduce.relaxed.sys.global.max.v4.f16x2",
            ],
            DataType::Bfloat16 => &[
                "multimem.ld_reduce.relaxed.sys.global.add.acc::f32.v4.bf16x2",
                "multimem.ld_reduce.relaxed.sys.global.min.v4.bf16x2",
                "multimem.ld_reduce.relaxed.sys.global.max.v4.bf16x2",
            ],
            DataType::Int32 => &[
                "multimem.ld_reduce.relaxed.sys.global.add.s32",
                "multimem.ld_reduce.relaxed.sys.global.min.s32",
                "multimem.ld_reduce.relaxed.sys.global.max.s32",
            ],
            DataType::Uint32 => &[
                "multimem.ld_reduce.relaxed.sys.global.add.u32",
                "multimem.ld_reduce.relaxed.sys.global.min.u32",
                "multimem.ld_reduce.relaxed.sys.global.max.u32",
            ],
            DataType::Int64 => &[
                "multimem.ld_reduce.relaxed.sys.global.add.u64",
                "multimem.ld_reduce.relaxed.sys.global.min.s64",
                "multimem.ld_reduce.relaxed.sys.global.max.s64",
            ],
            DataType::Uint64 => &[
                "multimem.ld_reduce.relaxed.sys.global.add.u64",
                "multimem.ld_reduce.relaxed.sys.global.min.u64",
                "multimem.ld_reduce.relaxed.sys.global.max.u64",
            ],
            _ => &[],
        };
        for needle in expect {
            assert!(ptx.contains(needle), "{dtype:?}: no {needle}");
        }
        // The unicast form's waits and stores are there too.
        for needle in [
            "st.release.sys.global.u64",
            "ld.acquire.sys.global.u64",
            "%globaltimer",
        ] {
            assert!(ptx.contains(needle), "{dtype:?}: no {needle}");
        }
    }
}

/// Before sm_90 the NVLS modules still compile, without any multimem instruction: the
/// unicast form is all they have.
#[test]
fn nvls_modules_compile_without_multimem_before_sm_90() {
    if !present_or_skip() {
        return;
    }
    for dtype in [DataType::Float32, DataType::Bfloat16, DataType::Int64] {
        let ptx = compile_source(
            weft_kernels::NVLS_NAME,
            weft_kernels::NVLS,
            dtype,
            (8, 0),
            &[],
        );
        assert!(
            !ptx.contains("multimem"),
            "{dtype:?} for sm_80 has multimem"
        );
        assert!(ptx.contains(&format!(".entry {}(", weft_kernels::nvls_entry(RedOp::Sum))));
    }
}
