/* weft's libnccl.so.2 through NCCL's C API, linked with -lnccl as an NCCL user links, on a
 * machine without a GPU (CI): everything that must work or fail without one. Each check
 * prints what it looked at; the first failure ends the program with status 1.
 * Built and run by scripts/nccl-api-test.sh. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nccl.h"

static int failures = 0;

#define CHECK(cond, ...)                                           \
    do {                                                           \
        if (!(cond)) {                                             \
            fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);   \
            fprintf(stderr, __VA_ARGS__);                          \
            fprintf(stderr, "\n");                                 \
            failures++;                                            \
        }                                                          \
    } while (0)

/* `rc` must be `want` and ncclGetLastError must mention `needle`. */
static void expect(const char *what, ncclResult_t rc, ncclResult_t want, const char *needle) {
    const char *last = ncclGetLastError(NULL);
    CHECK(rc == want, "%s: returned %d (%s), want %d; last error: %s", what, rc,
          ncclGetErrorString(rc), want, last);
    if (needle) {
        CHECK(last && strstr(last, needle), "%s: last error %s lacks \"%s\"", what,
              last ? last : "(null)", needle);
    }
    printf("ok  %-52s -> %d, \"%s\"\n", what, rc, needle ? last : "");
}

int main(void) {
    int version = 0;
    CHECK(ncclGetVersion(&version) == ncclSuccess, "ncclGetVersion");
    CHECK(version == NCCL_VERSION_CODE, "version %d, header says %d", version, NCCL_VERSION_CODE);
    printf("ok  ncclGetVersion = %d\n", version);
    expect("ncclGetVersion(NULL)", ncclGetVersion(NULL), ncclInvalidArgument, "version is NULL");

    /* Every code has its own text; an unknown one has one too. */
    for (int r = ncclSuccess; r <= ncclNumResults; r++) {
        const char *s = ncclGetErrorString((ncclResult_t)r);
        CHECK(s && *s, "ncclGetErrorString(%d) empty", r);
        for (int q = ncclSuccess; q < r; q++) {
            CHECK(strcmp(s, ncclGetErrorString((ncclResult_t)q)) != 0,
                  "codes %d and %d share a text", q, r);
        }
        printf("ok  ncclGetErrorString(%d) = \"%s\"\n", r, s);
    }
    CHECK(strstr(ncclGetErrorString(ncclInvalidUsage), "invalid usage") != NULL, "wording");

    /* Unique ids: 128 bytes, two calls differ (a random secret). */
    ncclUniqueId a, b;
    memset(&a, 0, sizeof a);
    memset(&b, 0, sizeof b);
    CHECK(ncclGetUniqueId(&a) == ncclSuccess, "ncclGetUniqueId: %s", ncclGetLastError(NULL));
    CHECK(ncclGetUniqueId(&b) == ncclSuccess, "ncclGetUniqueId again");
    CHECK(memcmp(&a, &b, sizeof a) != 0, "two unique ids are equal");
    printf("ok  ncclGetUniqueId x2, different ids of %zu bytes\n", sizeof a);
    expect("ncclGetUniqueId(NULL)", ncclGetUniqueId(NULL), ncclInvalidArgument, "NULL");

    /* Argument checks come before anything needs a GPU. */
    ncclComm_t comm = NULL;
    expect("ncclCommInitRank(NULL comm)", ncclCommInitRank(NULL, 2, a, 0), ncclInvalidArgument,
           "comm is NULL");
    expect("ncclCommInitRank(nranks 0)", ncclCommInitRank(&comm, 0, a, 0), ncclInvalidArgument,
           "nranks 0");
    expect("ncclCommInitRank(rank 2 of 2)", ncclCommInitRank(&comm, 2, a, 2), ncclInvalidArgument,
           "rank 2 of 2");
    expect("ncclCommInitRank(rank -1)", ncclCommInitRank(&comm, 2, a, -1), ncclInvalidArgument,
           "rank -1");
    ncclUniqueId junk;
    memset(&junk, 0xa5, sizeof junk);
    expect("ncclCommInitRank(garbage id)", ncclCommInitRank(&comm, 1, junk, 0),
           ncclInvalidArgument, "unique id");

    /* Config: unsupported fields are refused by name, a bad magic too. */
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.collnetEnable = 1;
    expect("ncclCommInitRankConfig(collnetEnable 1)",
           ncclCommInitRankConfig(&comm, 1, a, 0, &config), ncclInvalidUsage, "collnetEnable");
    config = (ncclConfig_t)NCCL_CONFIG_INITIALIZER;
    config.magic = 0;
    expect("ncclCommInitRankConfig(bad magic)", ncclCommInitRankConfig(&comm, 1, a, 0, &config),
           ncclInvalidArgument, "NCCL_CONFIG_INITIALIZER");

    /* Without a GPU: NCCL's system error (no libcuda) or unhandled CUDA error (no device). */
    ncclResult_t rc = ncclCommInitRank(&comm, 1, a, 0);
    const char *last = ncclGetLastError(NULL);
    CHECK(rc == ncclSystemError || rc == ncclUnhandledCudaError,
          "ncclCommInitRank without a GPU: %d (%s)", rc, last);
    CHECK(strstr(last, "GPU") || strstr(last, "libcuda"), "no-GPU message: %s", last);
    printf("ok  ncclCommInitRank without a GPU -> %d, \"%s\"\n", rc, last);
    rc = ncclCommInitAll(&comm, 1, NULL);
    CHECK(rc == ncclSystemError || rc == ncclUnhandledCudaError, "ncclCommInitAll: %d", rc);
    printf("ok  ncclCommInitAll without a GPU -> %d\n", rc);
    void *mem = NULL;
    rc = ncclMemAlloc(&mem, 4096);
    CHECK(rc == ncclSystemError || rc == ncclUnhandledCudaError, "ncclMemAlloc: %d", rc);
    printf("ok  ncclMemAlloc without a GPU -> %d\n", rc);
    expect("ncclMemFree(not ours)", ncclMemFree((void *)&config), ncclInvalidArgument,
           "ncclMemAlloc");
    expect("ncclMemFree(NULL)", ncclMemFree(NULL), ncclSuccess, NULL);

    /* A comm weft did not make: every call refuses it. */
    ncclComm_t bogus = (ncclComm_t)&junk;
    float buf[4];
    int n = 0;
    expect("ncclAllReduce(NULL comm)", ncclAllReduce(buf, buf, 4, ncclFloat, ncclSum, NULL, NULL),
           ncclInvalidArgument, "comm is NULL");
    expect("ncclAllReduce(bogus comm)",
           ncclAllReduce(buf, buf, 4, ncclFloat, ncclSum, bogus, NULL), ncclInvalidArgument,
           "not a live communicator");
    expect("ncclCommCount(bogus comm)", ncclCommCount(bogus, &n), ncclInvalidArgument,
           "not a live communicator");
    expect("ncclSend(NULL comm)", ncclSend(buf, 4, ncclFloat, 0, NULL, NULL), ncclInvalidArgument,
           "comm is NULL");
    expect("ncclAllReduce(datatype 12)",
           ncclAllReduce(buf, buf, 4, (ncclDataType_t)ncclNumTypes, ncclSum, NULL, NULL),
           ncclInvalidArgument, "invalid data type 12");
    expect("ncclAllReduce(datatype -1)",
           ncclAllReduce(buf, buf, 4, (ncclDataType_t)-1, ncclSum, NULL, NULL),
           ncclInvalidArgument, "invalid data type -1");
    expect("ncclReduce(op -1)", ncclReduce(buf, buf, 4, ncclFloat, (ncclRedOp_t)-1, 0, NULL, NULL),
           ncclInvalidArgument, "invalid reduction operator -1");
    /* Operators from ncclNumOps on are ncclRedOpCreatePreMulSum's: a communicator's. */
    expect("ncclReduce(op 5)", ncclReduce(buf, buf, 4, ncclFloat, ncclNumOps, 0, NULL, NULL),
           ncclInvalidArgument, "comm is NULL");
    expect("ncclSend(datatype 99)", ncclSend(buf, 4, (ncclDataType_t)99, 0, NULL, NULL),
           ncclInvalidArgument, "invalid data type 99");
    expect("ncclCommDestroy(NULL)", ncclCommDestroy(NULL), ncclSuccess, NULL);
    expect("ncclCommAbort(NULL)", ncclCommAbort(NULL), ncclSuccess, NULL);
    expect("ncclCommDestroy(bogus)", ncclCommDestroy(bogus), ncclInvalidArgument,
           "not a live communicator");

    /* Groups: nesting, end without start, a failure inside fails the end. */
    expect("ncclGroupEnd without start", ncclGroupEnd(), ncclInvalidUsage, "ncclGroupStart");
    CHECK(ncclGroupStart() == ncclSuccess, "start 1");
    CHECK(ncclGroupStart() == ncclSuccess, "start 2");
    CHECK(ncclGroupEnd() == ncclSuccess, "end 2");
    CHECK(ncclGroupEnd() == ncclSuccess, "end 1");
    printf("ok  nested empty groups\n");
    expect("ncclGroupEnd after balanced groups", ncclGroupEnd(), ncclInvalidUsage,
           "ncclGroupStart");
    CHECK(ncclGroupStart() == ncclSuccess, "start");
    expect("ncclAllReduce in a group, NULL comm",
           ncclAllReduce(buf, buf, 4, ncclFloat, ncclSum, NULL, NULL), ncclInvalidArgument,
           "comm is NULL");
    expect("ncclGroupEnd of a group with a failed call", ncclGroupEnd(), ncclInvalidArgument,
           "earlier call in it failed");

    /* PreMulSum operators belong to a communicator; built-in ones are never destroyed. */
    ncclRedOp_t op;
    float scalar = 2.0f;
    expect("ncclRedOpCreatePreMulSum, NULL comm",
           ncclRedOpCreatePreMulSum(&op, &scalar, ncclFloat, ncclScalarHostImmediate, NULL),
           ncclInvalidArgument, "comm is NULL");
    expect("ncclRedOpCreatePreMulSum, NULL op",
           ncclRedOpCreatePreMulSum(NULL, &scalar, ncclFloat, ncclScalarHostImmediate, NULL),
           ncclInvalidArgument, "op");
    expect("ncclRedOpDestroy(ncclSum)", ncclRedOpDestroy(ncclSum, NULL), ncclInvalidArgument,
           "built-in");

    /* Shrink checks its arguments before it needs a GPU. */
    expect("ncclCommShrink(NULL newcomm)",
           ncclCommShrink(NULL, NULL, 0, NULL, NULL, NCCL_SHRINK_DEFAULT), ncclInvalidArgument,
           "newcomm");
    /* Unsupported calls say so rather than succeed. */
    expect("ncclCommWindowRegister", ncclCommWindowRegister(NULL, buf, 16, NULL, 0),
           ncclInvalidUsage, "not supported");
    ncclSimInfo_t sim = NCCL_SIM_INFO_INITIALIZER;
    expect("ncclGroupSimulateEnd outside a group", ncclGroupSimulateEnd(&sim), ncclInvalidUsage,
           "without a matching");
    /* An empty group leaves the estimate unset (as NCCL), and the simulation closes it like an end. */
    expect("ncclGroupStart", ncclGroupStart(), ncclSuccess, NULL);
    expect("ncclGroupSimulateEnd in a group", ncclGroupSimulateEnd(&sim), ncclSuccess, NULL);
    CHECK(sim.estimatedTime == NCCL_UNDEF_FLOAT, "an empty group's estimate changed to %f", (double)sim.estimatedTime);
    expect("ncclGroupEnd after it", ncclGroupEnd(), ncclInvalidUsage, "without a matching");
    ncclSimInfo_t raw = {0};
    expect("ncclGroupStart", ncclGroupStart(), ncclSuccess, NULL);
    expect("ncclGroupSimulateEnd(not initialised)", ncclGroupSimulateEnd(&raw),
           ncclInvalidArgument, "NCCL_SIM_INFO_INITIALIZER");
    ncclUniqueId ids[2] = {a, b};
    /* Several ids are taken (every rank meets at the first); none is refused. */
    expect("ncclCommInitRankScalable(nId 0)",
           ncclCommInitRankScalable(&comm, 2, 0, 0, ids, NULL), ncclInvalidArgument, "nId 0");

    if (failures) {
        fprintf(stderr, "%d check(s) failed\n", failures);
        return 1;
    }
    printf("all checks passed\n");
    return 0;
}
