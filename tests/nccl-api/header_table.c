/* Prints, for every enum value and struct layout fact of weft's nccl.h, a C11
 * _Static_assert that NVIDIA's nccl.h must satisfy. scripts/nccl-header-check.sh compiles
 * this against weft's header, runs it, and compiles its output against NVIDIA's. */
#include <stddef.h>
#include <stdio.h>

#include "nccl.h"

#define EQ(expr) printf("_Static_assert((long long)(%s) == %lldLL, \"%s\");\n", #expr, (long long)(expr), #expr)

int main(void) {
    EQ(NCCL_MAJOR);
    EQ(NCCL_MINOR);
    EQ(NCCL_VERSION_CODE);
    EQ(NCCL_VERSION(2, 28, 3));
    EQ(NCCL_UNIQUE_ID_BYTES);
    EQ(sizeof(ncclUniqueId));
    EQ(NCCL_CONFIG_UNDEF_INT);
    EQ(NCCL_SPLIT_NOCOLOR);
    EQ(NCCL_WIN_DEFAULT);
    EQ(NCCL_WIN_COLL_SYMMETRIC);
    EQ(NCCL_WIN_REQUIRED_ALIGNMENT);
    EQ(NCCL_CTA_POLICY_DEFAULT);
    EQ(NCCL_CTA_POLICY_EFFICIENCY);
    EQ(NCCL_CTA_POLICY_ZERO);
    EQ(NCCL_SHRINK_DEFAULT);
    EQ(NCCL_SHRINK_ABORT);

    /* ncclResult_t */
    EQ(sizeof(ncclResult_t));
    EQ(ncclSuccess);
    EQ(ncclUnhandledCudaError);
    EQ(ncclSystemError);
    EQ(ncclInternalError);
    EQ(ncclInvalidArgument);
    EQ(ncclInvalidUsage);
    EQ(ncclRemoteError);
    EQ(ncclInProgress);
    EQ(ncclNumResults);

    /* ncclDataType_t, fp8 included */
    EQ(sizeof(ncclDataType_t));
    EQ(ncclInt8);
    EQ(ncclChar);
    EQ(ncclUint8);
    EQ(ncclInt32);
    EQ(ncclInt);
    EQ(ncclUint32);
    EQ(ncclInt64);
    EQ(ncclUint64);
    EQ(ncclFloat16);
    EQ(ncclHalf);
    EQ(ncclFloat32);
    EQ(ncclFloat);
    EQ(ncclFloat64);
    EQ(ncclDouble);
    EQ(ncclBfloat16);
    EQ(ncclFloat8e4m3);
    EQ(ncclFloat8e5m2);
    EQ(ncclNumTypes);

    /* ncclRedOp_t */
    EQ(sizeof(ncclRedOp_t));
    EQ(ncclSum);
    EQ(ncclProd);
    EQ(ncclMax);
    EQ(ncclMin);
    EQ(ncclAvg);
    EQ(ncclNumOps);
    EQ(ncclMaxRedOp);

    /* ncclScalarResidence_t */
    EQ(sizeof(ncclScalarResidence_t));
    EQ(ncclScalarDevice);
    EQ(ncclScalarHostImmediate);

    /* ncclConfig_t */
    EQ(sizeof(ncclConfig_t));
    EQ(offsetof(ncclConfig_t, size));
    EQ(offsetof(ncclConfig_t, magic));
    EQ(offsetof(ncclConfig_t, version));
    EQ(offsetof(ncclConfig_t, blocking));
    EQ(offsetof(ncclConfig_t, cgaClusterSize));
    EQ(offsetof(ncclConfig_t, minCTAs));
    EQ(offsetof(ncclConfig_t, maxCTAs));
    EQ(offsetof(ncclConfig_t, netName));
    EQ(offsetof(ncclConfig_t, splitShare));
    EQ(offsetof(ncclConfig_t, trafficClass));
    EQ(offsetof(ncclConfig_t, commName));
    EQ(offsetof(ncclConfig_t, collnetEnable));
    EQ(offsetof(ncclConfig_t, CTAPolicy));
    EQ(offsetof(ncclConfig_t, shrinkShare));
    EQ(offsetof(ncclConfig_t, nvlsCTAs));
    EQ(offsetof(ncclConfig_t, nChannelsPerNetPeer));
    EQ(offsetof(ncclConfig_t, nvlinkCentricSched));
    {
        /* The initializer's values, field by field. */
        ncclConfig_t c = NCCL_CONFIG_INITIALIZER;
        printf("static const ncclConfig_t weft_nvidia_init = NCCL_CONFIG_INITIALIZER;\n");
        printf("static const ncclConfig_t weft_expected = {%lluULL, %uU, %uU, %d, %d, %d, %d, "
               "0, %d, %d, 0, %d, %d, %d, %d, %d, %d};\n",
               (unsigned long long)c.size, c.magic, c.version, c.blocking, c.cgaClusterSize,
               c.minCTAs, c.maxCTAs, c.splitShare, c.trafficClass, c.collnetEnable,
               c.CTAPolicy, c.shrinkShare, c.nvlsCTAs, c.nChannelsPerNetPeer,
               c.nvlinkCentricSched);
    }

    /* ncclSimInfo_t */
    EQ(sizeof(ncclSimInfo_t));
    EQ(offsetof(ncclSimInfo_t, estimatedTime));
    return 0;
}
