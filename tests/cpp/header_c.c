/* weft.h must also be valid C (C11, no warnings): the kernels' host side and plain-C
 * callers include it too. Compiled with -fsyntax-only by scripts/cpp-test.sh and
 * tests/tests/cpp_client.rs. */
#include "weft.h"

_Static_assert(sizeof(weft_conn_info) == 104, "weft_conn_info layout");
_Static_assert(sizeof(weft_coll_work) == 88, "weft_coll_work layout");
_Static_assert(sizeof(weft_status) == 4, "weft_status is a uint32_t in C");
_Static_assert(WEFT_DATA_TYPE_BFLOAT16 == 9, "ncclBfloat16");
_Static_assert(WEFT_DATA_TYPE_FLOAT8_E5M2 == 11, "ncclFloat8e5m2");

int weft_header_compiles_as_c(void);
int weft_header_compiles_as_c(void) {
    size_t size = 0;
    weft_status s = weft_dtype_size(WEFT_DATA_TYPE_FLOAT64, &size);
    return s == WEFT_OK && size == 8;
}
