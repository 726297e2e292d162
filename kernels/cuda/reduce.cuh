// Element types and reductions, with the CPU executor's exact semantics
// (driver/src/exec/reduce): integer sum and product wrap; float min/max are fmin/fmax
// (a NaN operand yields the other, -0 < +0); half and bfloat16 compute in float and round
// to nearest even; float Avg pre-multiplies each input by 1/nranks, integer Avg divides the
// wrapped sum, truncating toward zero. NCCL's PreMulSum runs on the Avg entries (see
// Reduction): every type pre-multiplies by the user's scalar, integers wrapping, and nothing
// is divided. Compiled with --fmad=false so that x*s + y is two roundings, as on the CPU.
// fp8 computes through binary16 as NCCL does (see Fp8Elem).
#ifndef WEFT_REDUCE_CUH
#define WEFT_REDUCE_CUH

namespace weft {

typedef signed char i8;
typedef unsigned char u8;
typedef int i32;
typedef long long i64;
typedef unsigned short u16;

// weft_red_op's numbers.
enum Op : u32 { OP_SUM = 0, OP_PROD = 1, OP_MAX = 2, OP_MIN = 3, OP_AVG = 4 };

struct half_t { u16 bits; };
struct bf16_t { u16 bits; };

__device__ __forceinline__ float half_to_float(u16 hbits) {
  u32 h = hbits;
  u32 sign = (h & 0x8000u) << 16;
  u32 magnitude = h & 0x7fffu;
  u32 rebiased = (magnitude << 13) + ((127u - 15u) << 23);
  u32 bits;
  if (magnitude >= 0x7c00u) {
    bits = (rebiased + ((128u - 16u) << 23)) | (magnitude > 0x7c00u ? 0x00400000u : 0u);
  } else if (magnitude < 0x0400u) {
    bits = __float_as_uint(__uint_as_float(rebiased + (1u << 23)) -
                           __uint_as_float((127u - 14u) << 23));
  } else {
    bits = rebiased;
  }
  return __uint_as_float(bits | sign);
}

__device__ __forceinline__ u16 float_to_half(float value) {
  u32 x = __float_as_uint(value);
  u32 sign = (x >> 16) & 0x8000u;
  u32 a = x & 0x7fffffffu;
  u32 bits;
  if (a > 0x7f800000u) {
    bits = 0x7e00u | ((a >> 13) & 0x03ffu);
  } else if (a >= 0x477ff000u) {
    bits = 0x7c00u;
  } else if (a < 0x38800000u) {
    bits = __float_as_uint(__fadd_rn(__uint_as_float(a), 0.5f)) - 0x3f000000u;
  } else {
    u32 odd = (a >> 13) & 1u;
    bits = (a - ((127u - 15u) << 23) + 0x0fffu + odd) >> 13;
  }
  return (u16)(bits | sign);
}

__device__ __forceinline__ float bf16_to_float(u16 b) { return __uint_as_float(((u32)b) << 16); }

__device__ __forceinline__ u16 float_to_bf16(float value) {
  u32 x = __float_as_uint(value);
  if ((x & 0x7fffffffu) > 0x7f800000u) return (u16)((x >> 16) | 0x0040u);
  u32 odd = (x >> 16) & 1u;
  return (u16)((x + 0x7fffu + odd) >> 16);
}

__device__ __forceinline__ i32 order_key16(u16 bits) {
  short x = (short)bits;
  return (i32)(short)(x ^ ((x >> 15) & 0x7fff));
}

template <int OP>
__device__ __forceinline__ u16 minmax16(u16 a, u16 b, u16 infinity) {
  bool a_first = OP == OP_MIN ? order_key16(a) < order_key16(b) : order_key16(a) > order_key16(b);
  u16 pick = a_first ? a : b;
  if ((b & 0x7fffu) > infinity) return a;
  if ((a & 0x7fffu) > infinity) return b;
  return pick;
}

template <typename F, typename Bits>
__device__ __forceinline__ F fminmax(F x, F y, Bits xb, Bits yb, bool is_min) {
  // driver/src/exec/reduce/element.rs: equal values combine their bits (-0 vs +0).
  Bits both = is_min ? (xb | yb) : (xb & yb);
  F pick = is_min ? (x < y ? x : y) : (x > y ? x : y);
  if (x == y) pick = sizeof(F) == 4 ? (F)__uint_as_float((u32)both) : (F)__longlong_as_double((i64)both);
  if (y != y) return x;
  return pick;
}

// Traits: how one element type reduces. `Scale` is what the float Avg multiplies by.
template <typename T> struct Elem;

#define WEFT_INT_ELEM(T, U)                                                                 \
  template <> struct Elem<T> {                                                              \
    static constexpr bool is_float = false;                                                 \
    template <int OP> __device__ static __forceinline__ T apply(T x, T y) {                 \
      if (OP == OP_SUM || OP == OP_AVG) return (T)((U)x + (U)y);                            \
      if (OP == OP_PROD) return (T)((U)x * (U)y);                                           \
      if (OP == OP_MIN) return y < x ? y : x;                                               \
      return y > x ? y : x;                                                                 \
    }                                                                                       \
    __device__ static __forceinline__ T scale(T x, T s) { return (T)((U)x * (U)s); }        \
    __device__ static __forceinline__ T divide(T x, u64 n) {                                \
      bool negative = ((T)-1 < (T)0) && x < (T)0;                                           \
      U magnitude = negative ? (U)(0 - (U)x) : (U)x;                                        \
      U q = (U)((u64)magnitude / n);                                                        \
      return negative ? (T)(0 - q) : (T)q;                                                  \
    }                                                                                       \
  };

WEFT_INT_ELEM(i8, u8)
WEFT_INT_ELEM(u8, u8)
WEFT_INT_ELEM(i32, u32)
WEFT_INT_ELEM(u32, u32)
WEFT_INT_ELEM(i64, u64)
WEFT_INT_ELEM(u64, u64)

template <> struct Elem<float> {
  static constexpr bool is_float = true;
  template <int OP> __device__ static __forceinline__ float apply(float x, float y) {
    if (OP == OP_SUM || OP == OP_AVG) return __fadd_rn(x, y);
    if (OP == OP_PROD) return __fmul_rn(x, y);
    return fminmax<float, u32>(x, y, __float_as_uint(x), __float_as_uint(y), OP == OP_MIN);
  }
  __device__ static __forceinline__ float scale(float x, float s) { return __fmul_rn(x, s); }
  __device__ static __forceinline__ float divide(float x, u64) { return x; }
};

template <> struct Elem<double> {
  static constexpr bool is_float = true;
  template <int OP> __device__ static __forceinline__ double apply(double x, double y) {
    if (OP == OP_SUM || OP == OP_AVG) return __dadd_rn(x, y);
    if (OP == OP_PROD) return __dmul_rn(x, y);
    return fminmax<double, u64>(x, y, (u64)__double_as_longlong(x), (u64)__double_as_longlong(y),
                                OP == OP_MIN);
  }
  __device__ static __forceinline__ double scale(double x, double s) { return __dmul_rn(x, s); }
  __device__ static __forceinline__ double divide(double x, u64) { return x; }
};

// The two 16-bit float types differ only in their conversions through float and in
// infinity's magnitude bits.
struct HalfBits {
  static constexpr u16 INF = 0x7c00u;
  __device__ static __forceinline__ float to_float(u16 b) { return half_to_float(b); }
  __device__ static __forceinline__ u16 from_float(float v) { return float_to_half(v); }
};
struct Bf16Bits {
  static constexpr u16 INF = 0x7f80u;
  __device__ static __forceinline__ float to_float(u16 b) { return bf16_to_float(b); }
  __device__ static __forceinline__ u16 from_float(float v) { return float_to_bf16(v); }
};

template <typename W, typename Bits> struct Narrow16Elem {
  static constexpr bool is_float = true;
  template <int OP> __device__ static __forceinline__ W apply(W x, W y) {
    W r;
    if (OP == OP_SUM || OP == OP_AVG)
      r.bits = Bits::from_float(__fadd_rn(Bits::to_float(x.bits), Bits::to_float(y.bits)));
    else if (OP == OP_PROD)
      r.bits = Bits::from_float(__fmul_rn(Bits::to_float(x.bits), Bits::to_float(y.bits)));
    else
      r.bits = minmax16<OP>(x.bits, y.bits, Bits::INF);
    return r;
  }
  __device__ static __forceinline__ W scale(W x, W s) { return apply<OP_PROD>(x, s); }
  __device__ static __forceinline__ W divide(W x, u64) { return x; }
};

template <> struct Elem<half_t> : Narrow16Elem<half_t, HalfBits> {};
template <> struct Elem<bf16_t> : Narrow16Elem<bf16_t, Bf16Bits> {};

// fp8 (WEFT_DTYPE 10 and 11), as NCCL's device code (reduce_kernel.h, sm_90) and the CPU
// executor (driver/src/exec/reduce/fp8.rs): both operands widen exactly to binary16, one
// binary16 operation (add.rn / mul.rn, as __hadd / __hmul; min and max as for half_t
// above), then the result narrows to nearest even, saturating to the largest finite value
// (448, 57344; infinities too) and keeping NaNs NaN: the __nv_fp8_*(__half) constructor,
// whose conversion is the cvt.rn.satfinite below. The conversions are the hardware's, as
// NCCL's are; they exist from sm_89 (PTX ISA 7.8), and collectives.cu refuses fp8 below.
struct e4m3_t { u8 bits; };
struct e5m2_t { u8 bits; };

#if __CUDA_ARCH__ >= 890
// The second operand of each x2 conversion is unused: the low half (byte) is the element.
struct E4m3Cvt {
  __device__ static __forceinline__ u16 widen(u8 b) {
    u32 h;
    asm("cvt.rn.f16x2.e4m3x2 %0, %1;" : "=r"(h) : "h"((u16)b));
    return (u16)h;
  }
  __device__ static __forceinline__ u8 narrow(u16 h) {
    u16 b;
    asm("cvt.rn.satfinite.e4m3x2.f16x2 %0, %1;" : "=h"(b) : "r"((u32)h));
    return (u8)b;
  }
};
struct E5m2Cvt {
  __device__ static __forceinline__ u16 widen(u8 b) {
    u32 h;
    asm("cvt.rn.f16x2.e5m2x2 %0, %1;" : "=r"(h) : "h"((u16)b));
    return (u16)h;
  }
  __device__ static __forceinline__ u8 narrow(u16 h) {
    u16 b;
    asm("cvt.rn.satfinite.e5m2x2.f16x2 %0, %1;" : "=h"(b) : "r"((u32)h));
    return (u8)b;
  }
};

__device__ __forceinline__ u16 f16_add(u16 a, u16 b) {
  u16 r;
  asm("add.rn.f16 %0, %1, %2;" : "=h"(r) : "h"(a), "h"(b));
  return r;
}

__device__ __forceinline__ u16 f16_mul(u16 a, u16 b) {
  u16 r;
  asm("mul.rn.f16 %0, %1, %2;" : "=h"(r) : "h"(a), "h"(b));
  return r;
}

template <typename W, typename Cvt> struct Fp8Elem {
  static constexpr bool is_float = true;
  template <int OP> __device__ static __forceinline__ W apply(W x, W y) {
    u16 a = Cvt::widen(x.bits), b = Cvt::widen(y.bits), h;
    if (OP == OP_SUM || OP == OP_AVG)
      h = f16_add(a, b);
    else if (OP == OP_PROD)
      h = f16_mul(a, b);
    else
      h = minmax16<OP>(a, b, HalfBits::INF);
    W r;
    r.bits = Cvt::narrow(h);
    return r;
  }
  __device__ static __forceinline__ W scale(W x, W s) { return apply<OP_PROD>(x, s); }
  __device__ static __forceinline__ W divide(W x, u64) { return x; }
};

template <> struct Elem<e4m3_t> : Fp8Elem<e4m3_t, E4m3Cvt> {};
template <> struct Elem<e5m2_t> : Fp8Elem<e5m2_t, E5m2Cvt> {};
#endif

// One call's reduction: which op, the Avg factor (float) or divisor (integer).
//
// NCCL's PreMulSum (result = sum over ranks of scalar_r * x_r) runs on the OP_AVG entries,
// not entries of its own: NVRTC compiles every entry of every module per data type at run
// time, and float Avg already is "multiply each rank's own input by a factor, then sum".
// What differs is chosen at run time from weft_coll_work.red_op_flags: WEFT_RED_OP_PREMUL
// makes integers multiply too and skip Avg's final division; WEFT_RED_OP_ARG_DEVICE_PTR
// says red_op_arg is the address of the factor (ncclScalarDevice), loaded here once per
// thread when the kernel starts, so a value the stream wrote before the call is the one
// used. Every Avg entry then pre-multiplies (integer Avg by one), and only the integer
// finish tests `premul`, the same way in every thread. (Under LL, where pre and finish are
// run-time choices in one loop, the integer Avg entries spill more registers than before:
// 100 bytes for int32 on sm_90, against 8; SIMPLE's entries do not spill.)
template <typename T, int OP> struct Reduction {
  T avg_scale;  // float Avg: 1/nranks in T; PreMulSum: this rank's scalar
  u64 nranks;   // integer Avg: the divisor
  bool premul;  // PreMulSum: integers pre-multiply, and no division follows

  // Reads the operator's argument and flags of a launch (weft_coll_work or
  // weft_peer_work), for a communicator of `n` ranks.
  __device__ __forceinline__ void init(u64 red_op_arg, u32 red_op_flags, u64 n) {
    if (red_op_flags & WEFT_RED_OP_ARG_DEVICE_PTR)
      avg_scale = *(const T*)red_op_arg;
    else
      avg_scale = *(const T*)&red_op_arg;
    nranks = n;
    premul = (red_op_flags & WEFT_RED_OP_PREMUL) != 0;
    // Integer Avg multiplies by one: pre() then has no test of `premul` (its bytes: 1 in
    // the low byte, the little-endian 1 of every integer width).
    if (!Elem<T>::is_float && !premul) {
      u64 one = 1;
      avg_scale = *(const T*)&one;
    }
  }

  // What a rank's own input becomes when it enters the reduction.
  __device__ __forceinline__ T pre(T x) const {
    if (OP == OP_AVG) return Elem<T>::scale(x, avg_scale);
    return x;
  }
  __device__ __forceinline__ T combine(T x, T y) const { return Elem<T>::template apply<OP>(x, y); }
  // Applied once by the step that completes a result.
  __device__ __forceinline__ T finish(T x) const {
    if (OP == OP_AVG && !Elem<T>::is_float && !premul) return Elem<T>::divide(x, nranks);
    return x;
  }
};

// dst[i] = red.pre(src[i]) for n elements, thread `tid` of `nth`: how the peer-pointer
// algorithms (direct.cu, nvls.cu) put this rank's input where the others read it. The
// pre-multiplication happens here, by the rank that owns the input, because PreMulSum's
// scalar may differ between ranks: a rank that reduces its peers' data must not apply its
// own scalar to them. Operators without one copy 16-byte packs untouched.
template <typename T, int OP>
__device__ __forceinline__ void pre_copy(const Reduction<T, OP>& red, const T* src, T* dst, u64 n,
                                         u32 tid, u32 nth) {
  constexpr u64 PER_PACK = 16 / sizeof(T);
  union Pack {
    uint4 v;
    T e[PER_PACK];
  };
  const bool aligned = (((uintptr_t)src | (uintptr_t)dst) & 15) == 0;
  const u64 npacks = aligned ? n / PER_PACK : 0;
  for (u64 p = tid; p < npacks; p += nth) {
    Pack x;
    x.v = ((const uint4*)src)[p];
    if (OP == OP_AVG) {
#pragma unroll
      for (u64 j = 0; j < PER_PACK; j++) x.e[j] = red.pre(x.e[j]);
    }
    ((uint4*)dst)[p] = x.v;
  }
  for (u64 i = npacks * PER_PACK + tid; i < n; i += nth) dst[i] = red.pre(src[i]);
}

}  // namespace weft

#endif
