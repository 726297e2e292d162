/* Stand-in for CUDA's header on machines without CUDA: the header check needs only
 * cudaStream_t (declared as CUDA's driver_types.h does) to compile NVIDIA's nccl.h. */
#ifndef WEFT_CUDA_RUNTIME_STUB_H
#define WEFT_CUDA_RUNTIME_STUB_H
#include <stddef.h> /* size_t: the real header brings it */
#define CUDART_VERSION 12000
typedef struct CUstream_st *cudaStream_t;
#endif
