// NVLink SHARP access to a multicast address, one 16-byte pack at a time, for the element
// types and operators the hardware reduces (PTX ISA 8.1+, sm_90; the table NCCL uses on
// sm_90 in src/device/reduce_kernel.h):
//
//   type            sum                          min, max
//   int32, uint32   .add.s32 / .add.u32 (x4)     .min/.max.s32 / .u32 (x4)
//   int64, uint64   .add.u64 (x2: wrapping)      .min/.max.s64 / .u64 (x2)
//   float           .add.v4.f32                  -  (no f32 min/max in multimem)
//   double          .add.f64 (x2)                -
//   half, bfloat16  .add.acc::f32.v4.f16x2/bf16x2 .min/.max.v4.f16x2 / .bf16x2
//
// int8/uint8 (no 8-bit multimem reductions), products, Avg, and fp8 (sm_100 only) are not
// there: MultimemOk<T, OP> is false, the host refuses them with an error, and the kernel
// stops with an abort should one be launched anyway.
//
// Semantics the CPU reference may not share: half/bfloat16 sums accumulate every rank's
// value in f32 and round once (the ring rounds after every addition: equal for 2 ranks);
// float sums are the switch's order; half/bfloat16 min/max follow the hardware's NaN rules.
#ifndef WEFT_MULTIMEM_CUH
#define WEFT_MULTIMEM_CUH

#include "reduce.cuh"

namespace weft {

template <typename E, int OP> struct MultimemOk { static constexpr bool value = false; };
#define WEFT_MM_OK(E, OP) \
  template <> struct MultimemOk<E, OP> { static constexpr bool value = true; };
WEFT_MM_OK(i32, OP_SUM) WEFT_MM_OK(i32, OP_MIN) WEFT_MM_OK(i32, OP_MAX)
WEFT_MM_OK(u32, OP_SUM) WEFT_MM_OK(u32, OP_MIN) WEFT_MM_OK(u32, OP_MAX)
WEFT_MM_OK(i64, OP_SUM) WEFT_MM_OK(i64, OP_MIN) WEFT_MM_OK(i64, OP_MAX)
WEFT_MM_OK(u64, OP_SUM) WEFT_MM_OK(u64, OP_MIN) WEFT_MM_OK(u64, OP_MAX)
WEFT_MM_OK(float, OP_SUM)
WEFT_MM_OK(double, OP_SUM)
WEFT_MM_OK(half_t, OP_SUM) WEFT_MM_OK(half_t, OP_MIN) WEFT_MM_OK(half_t, OP_MAX)
WEFT_MM_OK(bf16_t, OP_SUM) WEFT_MM_OK(bf16_t, OP_MIN) WEFT_MM_OK(bf16_t, OP_MAX)
#undef WEFT_MM_OK

#if __CUDA_ARCH__ >= 900

// Stores a 16-byte pack into every rank's memory behind multicast address `a`. A store
// moves bits: the f32 vector form (the only 16-byte one) stores any type.
__device__ __forceinline__ void multimem_st16(uintptr_t a, uint4 v) {
  asm volatile("multimem.st.global.v4.f32 [%0], {%1,%2,%3,%4};" ::"l"(a), "r"(v.x), "r"(v.y),
               "r"(v.z), "r"(v.w)
               : "memory");
}

// Orders this thread's accesses to one memory through two virtual aliases: the multicast
// address and this rank's unicast mapping of the same physical memory are different
// virtual addresses, and the PTX memory model orders accesses through different aliases
// only across a `fence.proxy.alias` (PTX ISA, "Proxies" / membar; CUDA programming guide,
// multicast objects). The NVLS kernels execute one before each post and after each
// successful wait when they use the multicast form.
__device__ __forceinline__ void fence_proxy_alias() {
  asm volatile("fence.proxy.alias;" ::: "memory");
}

// Stores a counter into every rank's copy, ordered after this thread's earlier accesses.
__device__ __forceinline__ void multimem_st_release(uintptr_t a, u64 v) {
  asm volatile("multimem.st.release.sys.global.u64 [%0], %1;" ::"l"(a), "l"(v) : "memory");
}

#define WEFT_MM_V4(OPNAME, TY)                                                             \
  asm volatile("multimem.ld_reduce.relaxed.sys.global." OPNAME "." TY                     \
               " {%0,%1,%2,%3}, [%4];"                                                     \
               : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w)                                \
               : "l"(a)                                                                    \
               : "memory")
#define WEFT_MM_X4(OPNAME, TY)                                                             \
  {                                                                                        \
    u32* w = (u32*)&r;                                                                     \
    for (int k = 0; k < 4; k++)                                                            \
      asm volatile("multimem.ld_reduce.relaxed.sys.global." OPNAME "." TY " %0, [%1];"    \
                   : "=r"(w[k])                                                            \
                   : "l"(a + 4 * k)                                                        \
                   : "memory");                                                            \
  }
#define WEFT_MM_X2(OPNAME, TY)                                                             \
  {                                                                                        \
    u64* w = (u64*)&r;                                                                     \
    for (int k = 0; k < 2; k++)                                                            \
      asm volatile("multimem.ld_reduce.relaxed.sys.global." OPNAME "." TY " %0, [%1];"    \
                   : "=l"(w[k])                                                            \
                   : "l"(a + 8 * k)                                                        \
                   : "memory");                                                            \
  }
#define WEFT_MM_X2_F64(OPNAME)                                                             \
  {                                                                                        \
    double* w = (double*)&r;                                                               \
    for (int k = 0; k < 2; k++)                                                            \
      asm volatile("multimem.ld_reduce.relaxed.sys.global." OPNAME ".f64 %0, [%1];"       \
                   : "=d"(w[k])                                                            \
                   : "l"(a + 8 * k)                                                        \
                   : "memory");                                                            \
  }

// The reduction, over every rank's memory, of the 16-byte pack at multicast address `a`.
template <typename E, int OP> struct MultimemLoad;

#define WEFT_MM_LOAD(E, OP, BODY)                                   \
  template <> struct MultimemLoad<E, OP> {                          \
    static __device__ __forceinline__ uint4 load(uintptr_t a) {     \
      uint4 r;                                                      \
      BODY;                                                         \
      return r;                                                     \
    }                                                               \
  };
WEFT_MM_LOAD(i32, OP_SUM, WEFT_MM_X4("add", "s32"))
WEFT_MM_LOAD(i32, OP_MIN, WEFT_MM_X4("min", "s32"))
WEFT_MM_LOAD(i32, OP_MAX, WEFT_MM_X4("max", "s32"))
WEFT_MM_LOAD(u32, OP_SUM, WEFT_MM_X4("add", "u32"))
WEFT_MM_LOAD(u32, OP_MIN, WEFT_MM_X4("min", "u32"))
WEFT_MM_LOAD(u32, OP_MAX, WEFT_MM_X4("max", "u32"))
// A wrapping sum has the same bits signed or not: .u64 (there is no .add.s64).
WEFT_MM_LOAD(i64, OP_SUM, WEFT_MM_X2("add", "u64"))
WEFT_MM_LOAD(i64, OP_MIN, WEFT_MM_X2("min", "s64"))
WEFT_MM_LOAD(i64, OP_MAX, WEFT_MM_X2("max", "s64"))
WEFT_MM_LOAD(u64, OP_SUM, WEFT_MM_X2("add", "u64"))
WEFT_MM_LOAD(u64, OP_MIN, WEFT_MM_X2("min", "u64"))
WEFT_MM_LOAD(u64, OP_MAX, WEFT_MM_X2("max", "u64"))
WEFT_MM_LOAD(float, OP_SUM, WEFT_MM_V4("add", "v4.f32"))
WEFT_MM_LOAD(double, OP_SUM, WEFT_MM_X2_F64("add"))
WEFT_MM_LOAD(half_t, OP_SUM, WEFT_MM_V4("add.acc::f32", "v4.f16x2"))
WEFT_MM_LOAD(half_t, OP_MIN, WEFT_MM_V4("min", "v4.f16x2"))
WEFT_MM_LOAD(half_t, OP_MAX, WEFT_MM_V4("max", "v4.f16x2"))
WEFT_MM_LOAD(bf16_t, OP_SUM, WEFT_MM_V4("add.acc::f32", "v4.bf16x2"))
WEFT_MM_LOAD(bf16_t, OP_MIN, WEFT_MM_V4("min", "v4.bf16x2"))
WEFT_MM_LOAD(bf16_t, OP_MAX, WEFT_MM_V4("max", "v4.bf16x2"))
#undef WEFT_MM_LOAD
#undef WEFT_MM_V4
#undef WEFT_MM_X4
#undef WEFT_MM_X2
#undef WEFT_MM_X2_F64

#endif  // __CUDA_ARCH__ >= 900

}  // namespace weft

#endif
