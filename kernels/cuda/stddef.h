// <stddef.h> for NVRTC, which has no C library headers but declares size_t and ptrdiff_t
// itself: only what weft_abi.h needs beyond those. Never used by a host compiler.
#ifndef WEFT_NVRTC_STDDEF_H
#define WEFT_NVRTC_STDDEF_H
#ifndef NULL
#define NULL 0
#endif
#endif
