// The element type T of a module: -DWEFT_DTYPE=<weft_data_type number> picks it (one
// module per type, for every kernel source), with the architecture each type needs.
#ifndef WEFT_DTYPE_CUH
#define WEFT_DTYPE_CUH

#include "reduce.cuh"

#ifndef WEFT_DTYPE
#error "compile with -DWEFT_DTYPE=<weft_data_type number>"
#endif

namespace weft {

#if WEFT_DTYPE == 0
typedef i8 T;
#elif WEFT_DTYPE == 1
typedef u8 T;
#elif WEFT_DTYPE == 2
typedef i32 T;
#elif WEFT_DTYPE == 3
typedef u32 T;
#elif WEFT_DTYPE == 4
typedef i64 T;
#elif WEFT_DTYPE == 5
typedef u64 T;
#elif WEFT_DTYPE == 6
typedef half_t T;
#elif WEFT_DTYPE == 7
typedef float T;
#elif WEFT_DTYPE == 8
typedef double T;
#elif WEFT_DTYPE == 9
typedef bf16_t T;
#elif WEFT_DTYPE == 10
typedef e4m3_t T;
#elif WEFT_DTYPE == 11
typedef e5m2_t T;
#else
#error "unknown WEFT_DTYPE"
#endif

// The fp8 conversions (reduce.cuh) are instructions of sm_89 and newer; the driver does not
// ask for fp8 kernels on older GPUs (it copies fp8 with the uint8 module there).
#if (WEFT_DTYPE == 10 || WEFT_DTYPE == 11) && __CUDA_ARCH__ < 890
#error "fp8 kernels (WEFT_DTYPE 10, 11) need compute capability 8.9 or newer"
#endif

}  // namespace weft

#endif
