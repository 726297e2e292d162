// A C++ user of weft: includes the committed header and links libweft.a exactly as a user
// would, and calls every function with good and malformed input, checking status codes
// and the text of weft_last_error(). Prints "N passed, M failed"; exits non-zero on any
// failure. Built and run by scripts/cpp-test.sh and tests/tests/cpp_client.rs.

#include "weft.h"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>

namespace {

int passed = 0;
int failed = 0;

void check(bool ok, const char* what, int line, const std::string& detail = "") {
    if (ok) {
        ++passed;
        return;
    }
    ++failed;
    std::fprintf(stderr, "FAIL line %d: %s%s%s\n", line, what, detail.empty() ? "" : ": ",
                 detail.c_str());
}

#define CHECK(cond) check((cond), #cond, __LINE__)

std::string last_error() { return weft_last_error(); }

// The call returned `want`, and the last error contains `needle` (or is empty for WEFT_OK).
void expect_status(weft_status got, weft_status want, const char* needle, int line) {
    std::string err = last_error();
    std::string detail = std::string("status ") + std::to_string(got) + " (" +
                         weft_status_str(got) + "), last error \"" + err + "\"";
    check(got == want, "status", line, detail);
    if (want == WEFT_OK) {
        check(err.empty(), "last error cleared on success", line, detail);
    } else {
        check(err.find(needle) != std::string::npos, needle, line, detail);
    }
}

#define EXPECT(call, want, needle) expect_status((call), (want), (needle), __LINE__)

// The numbers are NCCL's and part of the ABI: a change must fail to compile.
static_assert(WEFT_DATA_TYPE_INT8 == 0 && WEFT_DATA_TYPE_UINT8 == 1 &&
                  WEFT_DATA_TYPE_INT32 == 2 && WEFT_DATA_TYPE_UINT32 == 3 &&
                  WEFT_DATA_TYPE_INT64 == 4 && WEFT_DATA_TYPE_UINT64 == 5 &&
                  WEFT_DATA_TYPE_FLOAT16 == 6 && WEFT_DATA_TYPE_FLOAT32 == 7 &&
                  WEFT_DATA_TYPE_FLOAT64 == 8 && WEFT_DATA_TYPE_BFLOAT16 == 9,
              "ncclDataType_t numbers");
static_assert(WEFT_RED_OP_SUM == 0 && WEFT_RED_OP_PROD == 1 && WEFT_RED_OP_MAX == 2 &&
                  WEFT_RED_OP_MIN == 3 && WEFT_RED_OP_AVG == 4,
              "ncclRedOp_t numbers");
static_assert(WEFT_COLL_KIND_ALL_REDUCE == 4 && WEFT_ALGORITHM_RING == 1 &&
                  WEFT_PROTOCOL_SIMPLE == 2 && WEFT_NUM_PROTOCOLS == 3 && WEFT_STEPS == 8,
              "NCCL's function, algorithm and protocol numbers");
static_assert(WEFT_OK == 0 && WEFT_ERR_NULL_ARG == 1 && WEFT_ERR_TRUNCATED == 2 &&
                  WEFT_ERR_BAD_MAGIC == 3 && WEFT_ERR_BAD_VERSION == 4 &&
                  WEFT_ERR_TOO_MANY == 5 && WEFT_ERR_BAD_FAMILY == 6 &&
                  WEFT_ERR_BAD_FIELD == 7 && WEFT_ERR_NO_ROUTE == 8 &&
                  WEFT_ERR_INTERNAL == 9 && WEFT_ERR_BAD_LENGTH == 10 &&
                  WEFT_ERR_BUFFER_TOO_SMALL == 11,
              "status codes never change meaning");
static_assert(sizeof(weft_conn_info) == 88 && offsetof(weft_conn_info, head) == 40 &&
                  offsetof(weft_conn_info, step) == 72,
              "weft_conn_info layout");
static_assert(sizeof(weft_coll_work) == 80 && offsetof(weft_coll_work, dtype) == 44,
              "weft_coll_work layout");
static_assert(sizeof(weft_kernel_args) == 88 && sizeof(weft_channel_peer) == 176 &&
                  sizeof(weft_dev_channel) == 64 && sizeof(weft_dev_comm) == 32,
              "device struct sizes");

void test_versions_and_layout() {
    std::string v = weft_version();
    CHECK(!v.empty());
    CHECK(std::count(v.begin(), v.end(), '.') == 2);
    CHECK(weft_abi_version() == WEFT_ABI_VERSION);

    weft_abi_layout l;
    std::memset(&l, 0xa5, sizeof l);
    EXPECT(weft_abi_layout_get(&l), WEFT_OK, "");
    CHECK(l.abi_version == WEFT_ABI_VERSION);
    CHECK(l.conn_info_size == sizeof(weft_conn_info));
    CHECK(l.conn_info_steps_offset == offsetof(weft_conn_info, steps));
    CHECK(l.coll_work_size == sizeof(weft_coll_work));
    CHECK(l.coll_work_reserved_offset == offsetof(weft_coll_work, reserved));
    CHECK(l.kernel_args_size == sizeof(weft_kernel_args));
    CHECK(l.ring_info_size == sizeof(weft_ring_info));
    CHECK(l.tree_info_size == sizeof(weft_tree_info));
    CHECK(l.channel_peer_size == sizeof(weft_channel_peer));
    CHECK(l.dev_channel_size == sizeof(weft_dev_channel));
    CHECK(l.dev_channel_npeers_offset == offsetof(weft_dev_channel, npeers));
    CHECK(l.dev_comm_size == sizeof(weft_dev_comm));
    CHECK(l.dev_comm_channels_offset == offsetof(weft_dev_comm, channels));
    EXPECT(weft_abi_layout_get(nullptr), WEFT_ERR_NULL_ARG,
           "weft_abi_layout_get: argument `out` is NULL");
}

void test_status_strings() {
    const char* names[] = {"WEFT_OK",          "WEFT_ERR_NULL_ARG",   "WEFT_ERR_TRUNCATED",
                           "WEFT_ERR_BAD_MAGIC", "WEFT_ERR_BAD_VERSION", "WEFT_ERR_TOO_MANY",
                           "WEFT_ERR_BAD_FAMILY", "WEFT_ERR_BAD_FIELD", "WEFT_ERR_NO_ROUTE",
                           "WEFT_ERR_INTERNAL",  "WEFT_ERR_BAD_LENGTH",
                           "WEFT_ERR_BUFFER_TOO_SMALL"};
    for (uint32_t code = 0; code < sizeof names / sizeof names[0]; ++code) {
        std::string s = weft_status_str(code);
        std::string want = std::string(names[code]) + ": ";
        check(s.compare(0, want.size(), want) == 0, "status text starts with its name",
              __LINE__, s);
    }
    CHECK(std::string(weft_status_str(12)) == "unknown weft status code");
    CHECK(std::string(weft_status_str(0xffffffffu)) == "unknown weft status code");
}

void test_data_types() {
    struct {
        uint32_t dtype;
        size_t size;
        const char* name;
    } const table[] = {{0, 1, "int8"},  {1, 1, "uint8"},  {2, 4, "int32"}, {3, 4, "uint32"},
                       {4, 8, "int64"}, {5, 8, "uint64"}, {6, 2, "half"},  {7, 4, "float"},
                       {8, 8, "double"}, {9, 2, "bfloat16"}};
    for (const auto& row : table) {
        size_t size = 12345;
        EXPECT(weft_dtype_size(row.dtype, &size), WEFT_OK, "");
        CHECK(size == row.size);
        const char* name = nullptr;
        EXPECT(weft_dtype_name(row.dtype, &name), WEFT_OK, "");
        check(name != nullptr && std::strcmp(name, row.name) == 0, "dtype name", __LINE__,
              name ? name : "(null)");
        uint32_t back = 0xdeadbeef;
        EXPECT(weft_dtype_from_name(row.name, &back), WEFT_OK, "");
        CHECK(back == row.dtype);
    }
    size_t size = 777;
    EXPECT(weft_dtype_size(10, &size), WEFT_ERR_BAD_FIELD,
           "weft_dtype_size: argument `dtype` = 10 is invalid");
    CHECK(size == 777);  // untouched on failure
    EXPECT(weft_dtype_size(0xffffffffu, &size), WEFT_ERR_BAD_FIELD, "= 4294967295 is invalid");
    EXPECT(weft_dtype_size(WEFT_DATA_TYPE_FLOAT32, nullptr), WEFT_ERR_NULL_ARG,
           "weft_dtype_size: argument `size` is NULL");
    EXPECT(weft_dtype_name(3, nullptr), WEFT_ERR_NULL_ARG, "argument `name` is NULL");
    const char* name = nullptr;
    EXPECT(weft_dtype_name(11, &name), WEFT_ERR_BAD_FIELD, "from 0 (int8) to 9 (bfloat16)");
    CHECK(name == nullptr);
    uint32_t dtype = 0;
    EXPECT(weft_dtype_from_name("Float", &dtype), WEFT_ERR_BAD_FIELD,
           "argument `name` = \"Float\" is invalid: expected one of int8");
    EXPECT(weft_dtype_from_name("", &dtype), WEFT_ERR_BAD_FIELD, "\"\" is invalid");
    EXPECT(weft_dtype_from_name("\xff\xfe", &dtype), WEFT_ERR_BAD_FIELD, "a UTF-8 string");
    EXPECT(weft_dtype_from_name(nullptr, &dtype), WEFT_ERR_NULL_ARG, "argument `name` is NULL");
    EXPECT(weft_dtype_from_name("half", nullptr), WEFT_ERR_NULL_ARG, "argument `dtype` is NULL");
}

void test_red_ops() {
    const char* names[] = {"sum", "prod", "max", "min", "avg"};
    for (uint32_t op = 0; op < 5; ++op) {
        const char* name = nullptr;
        EXPECT(weft_redop_name(op, &name), WEFT_OK, "");
        check(name != nullptr && std::strcmp(name, names[op]) == 0, "redop name", __LINE__,
              name ? name : "(null)");
        uint32_t back = 99;
        EXPECT(weft_redop_from_name(names[op], &back), WEFT_OK, "");
        CHECK(back == op);
    }
    const char* name = nullptr;
    EXPECT(weft_redop_name(5, &name), WEFT_ERR_BAD_FIELD,
           "weft_redop_name: argument `op` = 5 is invalid");
    EXPECT(weft_redop_name(0, nullptr), WEFT_ERR_NULL_ARG, "argument `name` is NULL");
    uint32_t op = 0;
    EXPECT(weft_redop_from_name("mean", &op), WEFT_ERR_BAD_FIELD,
           "expected one of sum prod max min avg");
    EXPECT(weft_redop_from_name(nullptr, &op), WEFT_ERR_NULL_ARG, "argument `name` is NULL");
    EXPECT(weft_redop_from_name("avg", nullptr), WEFT_ERR_NULL_ARG, "argument `op` is NULL");
}

void test_last_error_semantics() {
    size_t size = 0;
    EXPECT(weft_dtype_size(42, &size), WEFT_ERR_BAD_FIELD, "= 42");
    // Reading the error or a status text leaves it in place.
    CHECK(last_error().find("= 42") != std::string::npos);
    (void)weft_status_str(WEFT_ERR_BAD_FIELD);
    (void)weft_version();
    CHECK(last_error().find("= 42") != std::string::npos);
    // Another thread has its own (empty) last error.
    std::string other = "unset";
    std::thread t([&other] { other = weft_last_error(); });
    t.join();
    CHECK(other.empty());
    CHECK(last_error().find("= 42") != std::string::npos);
    // A success clears it.
    EXPECT(weft_dtype_size(0, &size), WEFT_OK, "");
}

void test_validate() {
    weft_coll_work w;
    std::memset(&w, 0, sizeof w);
    w.send_buff = 0x7000000;
    w.recv_buff = 0x7100000;
    w.count = 1000003;
    w.chunk_size = 131072 * 3;
    w.coll = WEFT_COLL_KIND_ALL_REDUCE;
    w.dtype = WEFT_DATA_TYPE_BFLOAT16;
    w.redop = WEFT_RED_OP_MAX;
    w.algorithm = WEFT_ALGORITHM_RING;
    w.protocol = WEFT_PROTOCOL_SIMPLE;
    w.channel_lo = 5;
    w.channel_count = 11;
    w.slice_steps = 2;
    w.chunk_steps = 4;
    EXPECT(weft_coll_work_validate(&w, 7), WEFT_OK, "");
    weft_coll_work bad = w;
    bad.dtype = 10;
    EXPECT(weft_coll_work_validate(&bad, 7), WEFT_ERR_BAD_FIELD,
           "weft_coll_work_validate: data type: invalid value 10");
    bad = w;
    bad.channel_lo = 60;
    bad.channel_count = 5;
    EXPECT(weft_coll_work_validate(&bad, 7), WEFT_ERR_BAD_FIELD, "work channel_count: invalid value 5");
    bad = w;
    bad.coll = WEFT_COLL_KIND_BROADCAST;
    bad.root = 7;
    EXPECT(weft_coll_work_validate(&bad, 7), WEFT_ERR_BAD_FIELD, "work root: invalid value 7");
    bad.root = 6;
    EXPECT(weft_coll_work_validate(&bad, 7), WEFT_OK, "");
    EXPECT(weft_coll_work_validate(nullptr, 7), WEFT_ERR_NULL_ARG, "argument `work` is NULL");

    weft_conn_info c;
    std::memset(&c, 0, sizeof c);
    c.buffs[WEFT_PROTOCOL_SIMPLE] = 0x7f0000100000ull;
    c.buff_sizes[WEFT_PROTOCOL_SIMPLE] = 8 * 524288;
    c.step_size = 524288;
    c.head = 0x7f0000000040ull;
    c.tail = 0x7f0000000080ull;
    c.flags = WEFT_CONN_DIRECT_READ | WEFT_CONN_PROXY_DRIVEN;
    c.steps = WEFT_STEPS;
    EXPECT(weft_conn_info_validate(&c), WEFT_OK, "");
    weft_conn_info badc = c;
    badc.flags |= 1u << 20;
    EXPECT(weft_conn_info_validate(&badc), WEFT_ERR_BAD_FIELD, "conn flags: invalid value 1048576");
    badc = c;
    badc.step_size = 524289;
    EXPECT(weft_conn_info_validate(&badc), WEFT_ERR_BAD_FIELD, "conn step_size");
    EXPECT(weft_conn_info_validate(nullptr), WEFT_ERR_NULL_ARG, "argument `conn` is NULL");
}

}  // namespace

int main() {
    test_versions_and_layout();
    test_status_strings();
    test_data_types();
    test_red_ops();
    test_last_error_semantics();
    test_validate();
    std::printf("%d passed, %d failed\n", passed, failed);
    return failed == 0 && passed > 0 ? 0 : 1;
}
