//! CUDA C++ sources of weft's collective kernels, embedded as text for NVRTC.
//!
//! The kernels are compiled on the machine that runs them, once per element type
//! (`-DWEFT_DTYPE=<weft_data_type>`, see [`defines`]), for the GPU's own architecture;
//! weft-cuda caches the result on disk. Nothing here needs a CUDA toolkit to build.
//!
//! - `cuda/collectives.cu`: the ring kernels (one block per channel; one entry point per
//!   reduction and protocol, [`ring_entry`] for SIMPLE, [`ring_ll_entry`] for LL) and the
//!   point-to-point kernel ([`P2P_ENTRY`]; each of its operations carries its protocol,
//!   `weft_p2p_op.protocol`).
//! - `cuda/ll.cuh`: the LL protocol's primitives (NCCL's `prims_ll.h` in weft's shape), and
//!   `cuda/ll_lines.cuh`, its arithmetic (flags, slots, line pairs, cleaning, credit), which
//!   this crate's tests compile with g++ and compare with weft_core::fifo::ll.
//! - `cuda/direct.cu`: one-shot and two-shot all-reduce over peer-mapped windows
//!   ([`direct_entry`]).
//! - `cuda/nvls.cu`: NVLS all-reduce, reduce-scatter and all-gather with `multimem`
//!   instructions, and their unicast form over peer-mapped memory ([`nvls_entry`]).
//! - `cuda/sync.cuh`: the waits every kernel shares (abort flag, deadline, fault record).
//! - `cuda/dtype.cuh`: the element type of a module (`-DWEFT_DTYPE`).
//! - `cuda/peer_layout.cuh`: weft_core::nvls's offsets and cuts for the GPU (and, in this
//!   crate's tests, for the host with g++, compared with the Rust original).
//! - `cuda/multimem.cuh`: `multimem.ld_reduce` / `multimem.st` for the types and operators
//!   the hardware reduces ([`nvls_multimem_reduces`]).
//! - `cuda/ring_program.cuh`: weft_core::sched's ring program, step for step, compiled
//!   for the GPU and, in this crate's tests, for the host with g++ to compare the two.
//! - `cuda/reduce.cuh`: element types and reductions with the CPU executor's semantics.
//! - `weft_abi.h`: the `#[repr(C)]` structs of weft_core::abi and their constants under
//!   C names ([`abi`]), generated for the kernels by cbindgen (`scripts/gen-header.sh`;
//!   libweft's `weft.h` includes it for C callers).
//! - `stdint.h`, `stddef.h`: the few C library types NVRTC lacks.

pub mod abi;

use weft_core::abi::{DataType, RedOp};

/// Name of the main source, as NVRTC reports it in errors.
pub const COLLECTIVES_NAME: &str = "collectives.cu";

/// The main source: the ring and point-to-point kernels.
pub const COLLECTIVES: &str = include_str!("../cuda/collectives.cu");

/// Name of the one-/two-shot source, as NVRTC reports it in errors.
pub const DIRECT_NAME: &str = "direct.cu";

/// One-shot and two-shot all-reduce over peer-mapped windows.
pub const DIRECT: &str = include_str!("../cuda/direct.cu");

/// Name of the NVLS source, as NVRTC reports it in errors.
pub const NVLS_NAME: &str = "nvls.cu";

/// NVLS all-reduce, reduce-scatter and all-gather (multicast and unicast forms).
pub const NVLS: &str = include_str!("../cuda/nvls.cu");

/// Every kernel source as `(name, text)`: one NVRTC module per source and element type.
pub const SOURCES: &[(&str, &str)] = &[
    (COLLECTIVES_NAME, COLLECTIVES),
    (DIRECT_NAME, DIRECT),
    (NVLS_NAME, NVLS),
];

/// The headers the main source includes, as `(include name, text)`.
pub const HEADERS: &[(&str, &str)] = &[
    ("weft_abi.h", include_str!("../include/weft_abi.h")),
    ("ring_program.cuh", include_str!("../cuda/ring_program.cuh")),
    ("ll.cuh", include_str!("../cuda/ll.cuh")),
    ("ll_lines.cuh", include_str!("../cuda/ll_lines.cuh")),
    ("ll_pair.cuh", include_str!("../cuda/ll_pair.cuh")),
    ("reduce.cuh", include_str!("../cuda/reduce.cuh")),
    ("sync.cuh", include_str!("../cuda/sync.cuh")),
    ("dtype.cuh", include_str!("../cuda/dtype.cuh")),
    ("multimem.cuh", include_str!("../cuda/multimem.cuh")),
    ("peer_layout.cuh", include_str!("../cuda/peer_layout.cuh")),
    ("stdint.h", include_str!("../cuda/stdint.h")),
    ("stddef.h", include_str!("../cuda/stddef.h")),
];

/// Threads per block every kernel is compiled for by default (`weft::THREADS`, from the
/// `WEFT_THREADS` define): launch exactly as many as the module was compiled for.
pub const THREADS: u32 = 512;

/// The point-to-point kernel: one `weft_p2p_args` parameter.
pub const P2P_ENTRY: &str = "weft_p2p";

/// The ring kernel for `op` (one `weft_kernel_args` parameter). Collectives that do not
/// reduce run the `Sum` one.
pub fn ring_entry(op: RedOp) -> &'static str {
    match op {
        RedOp::Sum => "weft_ring_sum",
        RedOp::Prod => "weft_ring_prod",
        RedOp::Max => "weft_ring_max",
        RedOp::Min => "weft_ring_min",
        RedOp::Avg => "weft_ring_avg",
    }
}

/// The one-/two-shot kernel for `op` (one `weft_peer_batch` parameter; each work's `algorithm`
/// picks one-shot or two-shot). Every element type and operator.
pub fn direct_entry(op: RedOp) -> &'static str {
    match op {
        RedOp::Sum => "weft_direct_sum",
        RedOp::Prod => "weft_direct_prod",
        RedOp::Max => "weft_direct_max",
        RedOp::Min => "weft_direct_min",
        RedOp::Avg => "weft_direct_avg",
    }
}

/// The NVLS kernel for `op` (one `weft_peer_work` parameter; its `algorithm` picks the
/// multicast or the unicast form). All-gather uses the `Sum` one.
pub fn nvls_entry(op: RedOp) -> &'static str {
    match op {
        RedOp::Sum => "weft_nvls_sum",
        RedOp::Prod => "weft_nvls_prod",
        RedOp::Max => "weft_nvls_max",
        RedOp::Min => "weft_nvls_min",
        RedOp::Avg => "weft_nvls_avg",
    }
}

/// The oldest compute capability with `multimem` instructions (PTX ISA 8.1, sm_90).
pub const MULTIMEM_MIN_ARCH: (u32, u32) = (9, 0);

/// Whether NVLink SHARP reduces `dtype` with `op` on sm_90 (`multimem.ld_reduce`; the
/// table in `cuda/multimem.cuh`, as NCCL's): 32- and 64-bit integers with sum, min and
/// max; float and double with sum; half and bfloat16 with sum, min and max. No 8-bit
/// types, no product or average, no fp8 (Blackwell only). The multicast form of an
/// all-reduce or reduce-scatter needs this; an all-gather only stores, any type; the
/// unicast form runs every type and operator.
pub fn nvls_multimem_reduces(dtype: DataType, op: RedOp) -> bool {
    use DataType::*;
    match dtype {
        Int32 | Uint32 | Int64 | Uint64 | Float16 | Bfloat16 => {
            matches!(op, RedOp::Sum | RedOp::Min | RedOp::Max)
        }
        Float32 | Float64 => op == RedOp::Sum,
        Int8 | Uint8 | Float8E4M3 | Float8E5M2 => false,
    }
}

/// The gathered all-reduce's reduction for `op` (`cuda/collectives.cu`: every rank's input,
/// gathered by a send/receive group, reduced in rank order; scalar parameters, see
/// `weft_gathered_reduce` there). Every element type; PreMulSum is not taken.
pub fn gathered_entry(op: RedOp) -> &'static str {
    match op {
        RedOp::Sum => "weft_gathered_sum",
        RedOp::Prod => "weft_gathered_prod",
        RedOp::Max => "weft_gathered_max",
        RedOp::Min => "weft_gathered_min",
        RedOp::Avg => "weft_gathered_avg",
    }
}

/// The LL ring kernel for `op` (NCCL's LL protocol, `cuda/ll.cuh`; one `weft_kernel_args`
/// parameter whose work says `protocol` LL). Collectives that do not reduce run the `Sum` one.
pub fn ring_ll_entry(op: RedOp) -> &'static str {
    match op {
        RedOp::Sum => "weft_ring_ll_sum",
        RedOp::Prod => "weft_ring_ll_prod",
        RedOp::Max => "weft_ring_ll_max",
        RedOp::Min => "weft_ring_ll_min",
        RedOp::Avg => "weft_ring_ll_avg",
    }
}

/// The oldest compute capability the fp8 modules (`Float8E4M3`, `Float8E5M2`) compile for:
/// their conversions are `cvt` instructions of sm_89 (PTX ISA 7.8). `collectives.cu` stops
/// with an `#error` below it; the driver checks first and says so.
pub const FP8_MIN_ARCH: (u32, u32) = (8, 9);

/// Whether the module of `dtype` exists for compute capability `arch`.
pub fn compiles_for(dtype: DataType, arch: (u32, u32)) -> bool {
    !dtype.is_fp8() || arch >= FP8_MIN_ARCH
}

/// The preprocessor definitions of the module for `dtype`.
pub fn defines(dtype: DataType) -> Vec<(String, String)> {
    vec![("WEFT_DTYPE".to_string(), (dtype as u32).to_string())]
}

#[cfg(test)]
mod test {
    use weft_core::abi::Protocol;

    use super::*;

    #[test]
    fn every_header_the_sources_include_is_provided() {
        let provided: Vec<&str> = HEADERS.iter().map(|h| h.0).collect();
        for text in SOURCES
            .iter()
            .map(|s| s.1)
            .chain(HEADERS.iter().map(|h| h.1))
        {
            for line in text.lines() {
                let Some(rest) = line.trim().strip_prefix("#include") else {
                    continue;
                };
                let name = rest
                    .trim()
                    .trim_matches(|c| c == '"' || c == '<' || c == '>');
                assert!(
                    provided.contains(&name),
                    "{name} is included but not in HEADERS"
                );
            }
        }
    }

    #[test]
    fn every_entry_point_exists_in_the_source() {
        for op in RedOp::ALL {
            let entry = ring_entry(*op);
            assert!(
                COLLECTIVES.contains(&format!("WEFT_RING_ENTRY({entry},")),
                "{entry} is not defined in collectives.cu"
            );
            let ll = ring_ll_entry(*op);
            assert!(
                COLLECTIVES.contains(&format!("WEFT_RING_LL_ENTRY({ll},")),
                "{ll} is not defined in collectives.cu"
            );
        }
        assert!(COLLECTIVES.contains(&format!(
            "void __launch_bounds__(weft::THREADS, 1) {P2P_ENTRY}("
        )));
        assert!(COLLECTIVES.contains(&format!("#define WEFT_THREADS {THREADS}\n")));
        for op in RedOp::ALL {
            let entry = direct_entry(*op);
            assert!(
                DIRECT.contains(&format!("WEFT_DIRECT_ENTRY({entry},")),
                "{entry} is not defined in direct.cu"
            );
            let entry = nvls_entry(*op);
            assert!(
                NVLS.contains(&format!("WEFT_NVLS_ENTRY({entry},")),
                "{entry} is not defined in nvls.cu"
            );
        }
        for src in [DIRECT, NVLS] {
            assert!(src.contains(&format!("#define WEFT_THREADS {THREADS}\n")));
        }
    }

    fn header(name: &str) -> &'static str {
        HEADERS.iter().find(|h| h.0 == name).unwrap().1
    }

    #[test]
    fn nvls_constants_match_core() {
        use weft_core::nvls;
        for (name, value) in [
            ("CREDIT_BLOCK", nvls::CREDIT_BLOCK),
            ("POSTED_OFFSET", nvls::POSTED_OFFSET),
            ("FREED_OFFSET", nvls::FREED_OFFSET),
            ("LAST_CHUNK_ALIGN", nvls::LAST_CHUNK_ALIGN),
            ("NVLS_STEPS", nvls::STEPS),
        ] {
            assert!(
                header("peer_layout.cuh").contains(&format!("constexpr u64 {name} = {value};")),
                "peer_layout.cuh's {name} is not core::nvls's {value}"
            );
        }
    }

    #[test]
    fn multimem_table_matches_the_header() {
        // Every (type, op) the host lets through has a MultimemOk specialisation and a
        // MultimemLoad, and no other.
        let mm = header("multimem.cuh");
        let cuda_type = |d: DataType| match d {
            DataType::Int32 => "i32",
            DataType::Uint32 => "u32",
            DataType::Int64 => "i64",
            DataType::Uint64 => "u64",
            DataType::Float16 => "half_t",
            DataType::Bfloat16 => "bf16_t",
            DataType::Float32 => "float",
            DataType::Float64 => "double",
            _ => "none",
        };
        let op_name = |o: RedOp| match o {
            RedOp::Sum => "OP_SUM",
            RedOp::Prod => "OP_PROD",
            RedOp::Max => "OP_MAX",
            RedOp::Min => "OP_MIN",
            RedOp::Avg => "OP_AVG",
        };
        let mut n = 0;
        for &d in DataType::ALL {
            for &o in RedOp::ALL {
                let ok = format!("WEFT_MM_OK({}, {})", cuda_type(d), op_name(o));
                let load = format!("WEFT_MM_LOAD({}, {},", cuda_type(d), op_name(o));
                let want = nvls_multimem_reduces(d, o);
                assert_eq!(mm.contains(&ok), want, "{d:?} {o:?}: {ok}");
                assert_eq!(mm.contains(&load), want, "{d:?} {o:?}: {load}");
                n += usize::from(want);
            }
        }
        assert_eq!(n, 20);
    }

    #[test]
    fn protocol_numbers_match_the_source() {
        // The kernels branch on weft_coll_work.protocol and weft_p2p_op.protocol with these.
        for (p, name) in [
            (Protocol::Ll, "PROTO_LL"),
            (Protocol::Simple, "PROTO_SIMPLE"),
        ] {
            let line = format!("constexpr int {name} = {};", p as u32);
            assert!(COLLECTIVES.contains(&line), "collectives.cu lacks `{line}`");
        }
        let lines = HEADERS.iter().find(|h| h.0 == "ll_lines.cuh").unwrap().1;
        let mask = format!(
            "constexpr u64 LL_CLEAN_MASK = {:#x}ull;",
            weft_core::fifo::ll::NCCL_LL_CLEAN_MASK
        );
        assert!(lines.contains(&mask), "ll_lines.cuh lacks `{mask}`");
    }

    #[test]
    fn dtype_numbers_match_the_source() {
        // collectives.cu maps WEFT_DTYPE numbers to types; weft_data_type must agree.
        let expect = [
            (DataType::Int8, "i8"),
            (DataType::Uint8, "u8"),
            (DataType::Int32, "i32"),
            (DataType::Uint32, "u32"),
            (DataType::Int64, "i64"),
            (DataType::Uint64, "u64"),
            (DataType::Float16, "half_t"),
            (DataType::Float32, "float"),
            (DataType::Float64, "double"),
            (DataType::Bfloat16, "bf16_t"),
            (DataType::Float8E4M3, "e4m3_t"),
            (DataType::Float8E5M2, "e5m2_t"),
        ];
        assert_eq!(expect.len(), DataType::ALL.len());
        for (dtype, ty) in expect {
            let n = dtype as u32;
            let cond = if n == 0 {
                "#if WEFT_DTYPE == 0".to_string()
            } else {
                format!("#elif WEFT_DTYPE == {n}")
            };
            assert!(
                header("dtype.cuh").contains(&format!("{cond}\ntypedef {ty} T;")),
                "{dtype:?} should be `{ty}` under `{cond}`"
            );
        }
    }

    #[test]
    fn fp8_arch_matches_the_source() {
        let (major, minor) = FP8_MIN_ARCH;
        let guard =
            format!("(WEFT_DTYPE == 10 || WEFT_DTYPE == 11) && __CUDA_ARCH__ < {major}{minor}0");
        assert!(
            header("dtype.cuh").contains(&guard),
            "dtype.cuh lacks `{guard}`"
        );
        let reduce = header("reduce.cuh");
        assert!(reduce.contains(&format!("#if __CUDA_ARCH__ >= {major}{minor}0")));
        assert!(compiles_for(DataType::Float8E4M3, (8, 9)));
        assert!(compiles_for(DataType::Float8E5M2, (10, 0)));
        assert!(!compiles_for(DataType::Float8E4M3, (8, 6)));
        assert!(compiles_for(DataType::Bfloat16, (7, 0)));
    }
}
