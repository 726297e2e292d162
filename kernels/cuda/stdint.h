// What NVRTC lacks of <stdint.h> (it has no C library headers): the fixed-width types
// weft_abi.h and the kernels use. Given to NVRTC as a header; never used by a host compiler.
#ifndef WEFT_NVRTC_STDINT_H
#define WEFT_NVRTC_STDINT_H
typedef signed char int8_t;
typedef unsigned char uint8_t;
typedef short int16_t;
typedef unsigned short uint16_t;
typedef int int32_t;
typedef unsigned int uint32_t;
typedef long long int64_t;
typedef unsigned long long uint64_t;
typedef unsigned long long uintptr_t;
typedef long long intptr_t;
#endif
