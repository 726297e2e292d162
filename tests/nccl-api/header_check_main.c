/* Compiled against NVIDIA's nccl.h with the assertions header_table.c printed from
 * weft's: a difference fails the build. The initializers are compared at run time. */
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "nccl.h"

#include "weft_expected.h"

int main(void) {
    if (memcmp(&weft_nvidia_init, &weft_expected, sizeof(ncclConfig_t)) != 0) {
        fprintf(stderr, "NCCL_CONFIG_INITIALIZER differs between weft's and NVIDIA's nccl.h\n");
        return 1;
    }
    printf("weft's nccl.h matches NVIDIA's (NCCL %d.%d.%d): enum values, struct sizes and "
           "offsets, NCCL_CONFIG_INITIALIZER\n",
           NCCL_MAJOR, NCCL_MINOR, NCCL_PATCH);
    return 0;
}
