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
                  WEFT_DATA_TYPE_FLOAT64 == 8 && WEFT_DATA_TYPE_BFLOAT16 == 9 &&
                  WEFT_DATA_TYPE_FLOAT8_E4M3 == 10 && WEFT_DATA_TYPE_FLOAT8_E5M2 == 11,
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
static_assert(sizeof(weft_conn_info) == 104 && offsetof(weft_conn_info, head) == 40 &&
                  offsetof(weft_conn_info, step) == 72,
              "weft_conn_info layout");
static_assert(sizeof(weft_coll_work) == 88 && offsetof(weft_coll_work, dtype) == 44 &&
                  offsetof(weft_coll_work, red_op_flags) == 80,
              "weft_coll_work layout");
static_assert(sizeof(weft_kernel_args) == 16 + 88 * WEFT_COLL_BATCH_MAX &&
                  offsetof(weft_kernel_args, nworks) == 8 && offsetof(weft_kernel_args, works) == 16,
              "weft_kernel_args layout");
static_assert(sizeof(weft_peer_work) == 272 && sizeof(weft_peer_batch) == 8 + 272 * WEFT_PEER_BATCH_MAX &&
                  offsetof(weft_peer_batch, works) == 8,
              "weft_peer_batch layout");
static_assert(sizeof(weft_channel_peer) == 208 &&
                  sizeof(weft_dev_channel) == 64 && sizeof(weft_dev_comm) == 48 && sizeof(weft_kernel_fault) == 32,
              "device struct sizes");

static_assert(sizeof(weft_mesh_entry) == 28 && offsetof(weft_mesh_entry, qpn) == 20 &&
                  sizeof(weft_mesh_handle) == 8 + 28 * WEFT_MESH_MAX_ENTRIES &&
                  sizeof(weft_local_nic) == 24 && sizeof(weft_route) == 64 &&
                  offsetof(weft_route, speed_mbps) == 60,
              "mesh handle and route layouts");

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
    CHECK(l.coll_work_direct_offset == offsetof(weft_coll_work, direct));
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
                       {8, 8, "double"}, {9, 2, "bfloat16"}, {10, 1, "f8e4m3"},
                       {11, 1, "f8e5m2"}};
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
    EXPECT(weft_dtype_size(12, &size), WEFT_ERR_BAD_FIELD,
           "weft_dtype_size: argument `dtype` = 12 is invalid");
    CHECK(size == 777);  // untouched on failure
    EXPECT(weft_dtype_size(0xffffffffu, &size), WEFT_ERR_BAD_FIELD, "= 4294967295 is invalid");
    EXPECT(weft_dtype_size(WEFT_DATA_TYPE_FLOAT32, nullptr), WEFT_ERR_NULL_ARG,
           "weft_dtype_size: argument `size` is NULL");
    EXPECT(weft_dtype_name(3, nullptr), WEFT_ERR_NULL_ARG, "argument `name` is NULL");
    const char* name = nullptr;
    EXPECT(weft_dtype_name(12, &name), WEFT_ERR_BAD_FIELD, "from 0 (int8) to 11 (f8e5m2)");
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
    bad.dtype = 12;
    EXPECT(weft_coll_work_validate(&bad, 7), WEFT_ERR_BAD_FIELD,
           "weft_coll_work_validate: data type: invalid value 12");
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

// ---- mesh handles ----

// Deterministic test data without a dependency: xorshift64*.
struct XorShift {
    uint64_t s;
    uint64_t next() {
        s ^= s >> 12;
        s ^= s << 25;
        s ^= s >> 27;
        return s * 0x2545F4914F6CDD1Dull;
    }
    uint32_t below(uint32_t n) { return static_cast<uint32_t>(next() % n); }
};

weft_mesh_entry v4_entry(uint8_t a, uint8_t b, uint8_t c, uint8_t d, uint8_t prefix) {
    weft_mesh_entry e;
    std::memset(&e, 0, sizeof e);
    e.family = WEFT_FAMILY_IPV4;
    e.prefix_len = prefix;
    e.addr[0] = a;
    e.addr[1] = b;
    e.addr[2] = c;
    e.addr[3] = d;
    return e;
}

weft_mesh_entry v6_entry(const uint8_t (&addr)[16], uint8_t prefix) {
    weft_mesh_entry e;
    std::memset(&e, 0, sizeof e);
    e.family = WEFT_FAMILY_IPV6;
    e.prefix_len = prefix;
    std::memcpy(e.addr, addr, 16);
    return e;
}

weft_mesh_handle empty_handle(uint16_t port) {
    weft_mesh_handle h;
    std::memset(&h, 0, sizeof h);
    h.port = port;
    return h;
}

bool same_handle(const weft_mesh_handle& a, const weft_mesh_handle& b) {
    if (a.port != b.port || a.count != b.count || a.reserved != b.reserved) return false;
    for (uint32_t i = 0; i < a.count; ++i) {
        const weft_mesh_entry& x = a.entries[i];
        const weft_mesh_entry& y = b.entries[i];
        if (x.family != y.family || x.prefix_len != y.prefix_len ||
            x.nic_index != y.nic_index || x.gid_index != y.gid_index || x.qpn != y.qpn ||
            x.speed_mbps != y.speed_mbps || std::memcmp(x.addr, y.addr, 16) != 0)
            return false;
    }
    return true;
}

std::string hex(const uint8_t* p, size_t n) {
    std::string s;
    char buf[4];
    for (size_t i = 0; i < n; ++i) {
        std::snprintf(buf, sizeof buf, "%02x", p[i]);
        s += buf;
    }
    return s;
}

void test_mesh_exact_bytes() {
    weft_mesh_handle h = empty_handle(0x1234);
    h.count = 3;
    h.entries[0] = v4_entry(10, 1, 2, 3, 24);
    h.entries[0].nic_index = 1;
    h.entries[0].gid_index = 3;
    h.entries[0].qpn = 0x123456;
    h.entries[0].speed_mbps = 100000;
    const uint8_t a6[16] = {0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 1};
    const uint8_t b6[16] = {0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 2};
    h.entries[1] = v6_entry(a6, 64);
    h.entries[1].nic_index = 2;
    h.entries[1].qpn = 7;
    h.entries[2] = v6_entry(b6, 64);
    h.entries[2].nic_index = 3;
    h.entries[2].speed_mbps = 400000;

    uint8_t out[WEFT_NET_HANDLE_MAXSIZE];
    std::memset(out, 0xa5, sizeof out);
    size_t written = 0;
    EXPECT(weft_mesh_handle_encode(&h, out, sizeof out, &written), WEFT_OK, "");
    const uint8_t want[] = {
        0x57, 0x46, 0x4d, 0x48, 0x00, 0x01, 0x12, 0x34, 0x03,  // "WFMH" v1 port count
        0x04, 0x18, 0x01, 0x03, 0x12, 0x34, 0x56, 0x03, 0xe8,  // v4 /24 nic1 gid3 qpn 1000x100M
        0x0a, 0x01, 0x02, 0x03,                                // 10.1.2.3
        0x06, 0x40, 0x02, 0x00, 0x00, 0x00, 0x07, 0x00, 0x00,  // v6 /64 nic2 qpn 7 speed 0
        0x00,                                                  // shares 0 bytes
        0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 1,
        0x06, 0x40, 0x03, 0x00, 0x00, 0x00, 0x00, 0x0f, 0xa0,  // v6 /64 nic3 4000x100M
        0x0f, 0x02,                                            // shares 15 bytes, then ::2
    };
    check(written == sizeof want && std::memcmp(out, want, sizeof want) == 0, "exact bytes",
          __LINE__, hex(out, written));
    // The rest of NCCL's 128 bytes is zeroed: no stale memory goes over the wire...
    bool zero_tail = true;
    for (size_t i = sizeof want; i < WEFT_NET_HANDLE_MAXSIZE; ++i) zero_tail &= out[i] == 0;
    CHECK(zero_tail);
    // ...and a larger buffer is not written past 128 bytes.
    uint8_t big[WEFT_NET_HANDLE_MAXSIZE + 40];
    std::memset(big, 0xa5, sizeof big);
    EXPECT(weft_mesh_handle_encode(&h, big, sizeof big, &written), WEFT_OK, "");
    CHECK(written == sizeof want && std::memcmp(big, want, sizeof want) == 0);
    CHECK(big[WEFT_NET_HANDLE_MAXSIZE - 1] == 0 && big[WEFT_NET_HANDLE_MAXSIZE] == 0xa5 &&
          big[sizeof big - 1] == 0xa5);

    weft_mesh_handle back;
    std::memset(&back, 0x5a, sizeof back);
    // The whole 128-byte NCCL handle may be passed: trailing bytes are ignored.
    EXPECT(weft_mesh_handle_decode(out, sizeof out, &back), WEFT_OK, "");
    CHECK(same_handle(h, back));
    weft_mesh_handle zeroed = empty_handle(0);
    CHECK(std::memcmp(&back.entries[3], &zeroed.entries[3], sizeof(weft_mesh_entry) * 6) == 0);
}

void test_mesh_round_trip_random() {
    XorShift rng{0x9e3779b97f4a7c15ull};
    for (int iter = 0; iter < 300; ++iter) {
        weft_mesh_handle h = empty_handle(static_cast<uint16_t>(rng.next()));
        // At most 3 IPv6 and 3 IPv4 entries always fit in 128 bytes.
        uint32_t n6 = rng.below(4), n4 = rng.below(4);
        for (uint32_t i = 0; i < n6 + n4; ++i) {
            weft_mesh_entry& e = h.entries[i];
            bool v6 = i < n6;
            e.family = v6 ? WEFT_FAMILY_IPV6 : WEFT_FAMILY_IPV4;
            for (int b = 0; b < (v6 ? 16 : 4); ++b) e.addr[b] = static_cast<uint8_t>(rng.next());
            e.prefix_len = static_cast<uint8_t>(rng.below(v6 ? 129 : 33));
            e.nic_index = static_cast<uint8_t>(rng.next());
            e.gid_index = static_cast<uint8_t>(rng.next());
            e.qpn = rng.below(0x1000000);
            e.speed_mbps = rng.below(65536) * 100;
        }
        h.count = n6 + n4;
        uint8_t out[WEFT_NET_HANDLE_MAXSIZE];
        size_t written = 0;
        weft_status s = weft_mesh_handle_encode(&h, out, sizeof out, &written);
        check(s == WEFT_OK, "random handle encodes", __LINE__, last_error());
        check(written <= WEFT_NET_HANDLE_MAXSIZE && written >= 9, "size", __LINE__);
        weft_mesh_handle back;
        std::memset(&back, 0xff, sizeof back);
        s = weft_mesh_handle_decode(out, written, &back);
        check(s == WEFT_OK, "random handle decodes", __LINE__, last_error());
        CHECK(same_handle(h, back));
        // Every truncation is an error that leaves *out alone.
        if (iter % 10 == 0) {
            for (size_t len = 0; len < written; ++len) {
                weft_mesh_handle untouched = empty_handle(4321);
                s = weft_mesh_handle_decode(out, len, &untouched);
                check(s == WEFT_ERR_TRUNCATED, "truncated decode", __LINE__,
                      std::to_string(len) + ": " + last_error());
                CHECK(untouched.port == 4321 && untouched.count == 0);
            }
        }
    }
}

void test_mesh_encode_errors() {
    uint8_t out[WEFT_NET_HANDLE_MAXSIZE];
    size_t written = 0;
    weft_mesh_handle h = empty_handle(1);
    h.count = WEFT_MESH_MAX_ENTRIES;
    for (uint32_t i = 0; i < h.count; ++i) h.entries[i] = v4_entry(10, 0, static_cast<uint8_t>(i), 1, 24);
    EXPECT(weft_mesh_handle_encode(&h, out, sizeof out, &written), WEFT_OK, "");
    CHECK(written == 126);

    h.count = WEFT_MESH_MAX_ENTRIES + 1;
    EXPECT(weft_mesh_handle_encode(&h, out, sizeof out, &written), WEFT_ERR_TOO_MANY,
           "handle->count = 10: a mesh handle holds at most 9 entries");
    h.count = 0xffffffffu;
    EXPECT(weft_mesh_handle_encode(&h, out, sizeof out, &written), WEFT_ERR_TOO_MANY,
           "handle->count = 4294967295");

    // Five unrelated IPv6 addresses do not fit in 128 bytes.
    weft_mesh_handle big = empty_handle(2);
    big.count = 5;
    for (uint32_t i = 0; i < big.count; ++i) {
        uint8_t a[16] = {0x20, 0x01, static_cast<uint8_t>(0x10 * i + 1), 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14};
        big.entries[i] = v6_entry(a, 64);
    }
    EXPECT(weft_mesh_handle_encode(&big, out, sizeof out, &written), WEFT_ERR_TOO_MANY,
           "handle->entries[4]: ");

    weft_mesh_handle bad = empty_handle(3);
    bad.count = 2;
    bad.entries[0] = v4_entry(10, 0, 0, 1, 24);
    bad.entries[1] = v4_entry(10, 0, 1, 1, 24);
    bad.entries[1].family = 5;
    EXPECT(weft_mesh_handle_encode(&bad, out, sizeof out, &written), WEFT_ERR_BAD_FAMILY,
           "handle->entries[1].family = 5: expected 4 (IPv4) or 6 (IPv6)");
    bad.entries[1] = v4_entry(10, 0, 1, 1, 24);
    bad.entries[1].addr[9] = 1;
    EXPECT(weft_mesh_handle_encode(&bad, out, sizeof out, &written), WEFT_ERR_BAD_FIELD,
           "handle->entries[1].addr: family is IPv4 but bytes 4..16 are not zero");
    bad.entries[1] = v4_entry(10, 0, 1, 1, 33);
    EXPECT(weft_mesh_handle_encode(&bad, out, sizeof out, &written), WEFT_ERR_BAD_FIELD,
           "handle->entries[1]: prefix_len: invalid value 33");
    bad.entries[1] = v4_entry(10, 0, 1, 1, 24);
    bad.entries[1].qpn = 0x1000000;
    EXPECT(weft_mesh_handle_encode(&bad, out, sizeof out, &written), WEFT_ERR_BAD_FIELD,
           "handle->entries[1]: qpn: invalid value 16777216");
    bad.entries[1].qpn = 1;
    bad.entries[1].speed_mbps = 150;
    EXPECT(weft_mesh_handle_encode(&bad, out, sizeof out, &written), WEFT_ERR_BAD_FIELD,
           "handle->entries[1]: speed");
    bad.entries[1].speed_mbps = 0;
    bad.reserved = 1;
    EXPECT(weft_mesh_handle_encode(&bad, out, sizeof out, &written), WEFT_ERR_BAD_FIELD,
           "argument `handle->reserved` = 1");
    bad.reserved = 0;

    // A buffer one byte short reports the size needed; exactly that size works.
    written = 0;
    EXPECT(weft_mesh_handle_encode(&bad, out, 34, &written), WEFT_ERR_BUFFER_TOO_SMALL,
           "out_len = 34 but the handle needs 35 bytes");
    CHECK(written == 35);
    EXPECT(weft_mesh_handle_encode(&bad, out, written, &written), WEFT_OK, "");
    CHECK(written == 35);

    EXPECT(weft_mesh_handle_encode(nullptr, out, sizeof out, &written), WEFT_ERR_NULL_ARG,
           "weft_mesh_handle_encode: argument `handle` is NULL");
    EXPECT(weft_mesh_handle_encode(&bad, nullptr, sizeof out, &written), WEFT_ERR_NULL_ARG,
           "argument `out` is NULL");
    EXPECT(weft_mesh_handle_encode(&bad, out, sizeof out, nullptr), WEFT_ERR_NULL_ARG,
           "argument `written` is NULL");
}

void test_mesh_decode_errors() {
    weft_mesh_handle h = empty_handle(9000);
    h.count = 2;
    h.entries[0] = v4_entry(192, 168, 7, 1, 24);
    h.entries[1] = v4_entry(192, 168, 8, 1, 24);
    uint8_t good[WEFT_NET_HANDLE_MAXSIZE];
    size_t n = 0;
    EXPECT(weft_mesh_handle_encode(&h, good, sizeof good, &n), WEFT_OK, "");

    weft_mesh_handle out = empty_handle(77);
    uint8_t b[WEFT_NET_HANDLE_MAXSIZE];
    std::memcpy(b, good, n);
    b[0] ^= 0x01;
    EXPECT(weft_mesh_handle_decode(b, n, &out), WEFT_ERR_BAD_MAGIC,
           "weft_mesh_handle_decode: bad magic 0x5646");
    std::memcpy(b, good, n);
    b[5] = 2;
    EXPECT(weft_mesh_handle_decode(b, n, &out), WEFT_ERR_BAD_VERSION, "unsupported version 2");
    std::memcpy(b, good, n);
    b[8] = 10;
    EXPECT(weft_mesh_handle_decode(b, n, &out), WEFT_ERR_TOO_MANY, "exceeds the maximum of 9");
    std::memcpy(b, good, n);
    b[9 + 13] = 5;  // family byte of the second entry
    EXPECT(weft_mesh_handle_decode(b, n, &out), WEFT_ERR_BAD_FAMILY,
           "address family 5 is neither IPv4 (4) nor IPv6 (6)");
    std::memcpy(b, good, n);
    b[9 + 1] = 40;  // IPv4 prefix length 40
    EXPECT(weft_mesh_handle_decode(b, n, &out), WEFT_ERR_BAD_FIELD, "prefix_len");
    EXPECT(weft_mesh_handle_decode(good, 3, &out), WEFT_ERR_TRUNCATED, "truncated");
    EXPECT(weft_mesh_handle_decode(good, n - 1, &out), WEFT_ERR_TRUNCATED, "truncated");
    CHECK(out.port == 77 && out.count == 0);  // untouched by every failure
    EXPECT(weft_mesh_handle_decode(nullptr, n, &out), WEFT_ERR_NULL_ARG,
           "argument `bytes` is NULL");
    EXPECT(weft_mesh_handle_decode(good, n, nullptr), WEFT_ERR_NULL_ARG,
           "argument `out` is NULL");
    EXPECT(weft_mesh_handle_decode(good, n, &out), WEFT_OK, "");
    CHECK(same_handle(h, out));
}

weft_local_nic nic(uint8_t index, uint8_t a, uint8_t b, uint8_t c, uint8_t d, uint8_t prefix,
                   uint32_t speed, bool up) {
    weft_local_nic n;
    std::memset(&n, 0, sizeof n);
    n.index = index;
    n.family = WEFT_FAMILY_IPV4;
    n.prefix_len = prefix;
    n.up = up ? 1 : 0;
    n.addr[0] = a;
    n.addr[1] = b;
    n.addr[2] = c;
    n.addr[3] = d;
    n.speed_mbps = speed;
    return n;
}

void test_select_nic() {
    const weft_local_nic local[] = {
        nic(0, 192, 168, 1, 10, 24, 100000, true),
        nic(1, 10, 0, 0, 5, 24, 200000, true),
        nic(2, 10, 0, 1, 5, 24, 400000, false),
    };
    weft_mesh_handle peer = empty_handle(5000);
    peer.count = 3;
    peer.entries[0] = v4_entry(10, 0, 1, 7, 24);
    peer.entries[1] = v4_entry(10, 0, 0, 9, 24);
    peer.entries[2] = v4_entry(192, 168, 1, 20, 24);
    peer.entries[1].nic_index = 4;

    weft_route r;
    std::memset(&r, 0xa5, sizeof r);
    EXPECT(weft_select_nic(local, 3, &peer, &r), WEFT_OK, "");
    // 10.0.1.0/24 would be fastest but its NIC is down; 10.0.0.0/24 at 200G beats 100G.
    CHECK(r.local_position == 1);
    CHECK(r.peer_position == 1);
    CHECK(r.family == WEFT_FAMILY_IPV4);
    CHECK(r.local_nic_index == 1);
    CHECK(r.peer_nic_index == 4);
    CHECK(r.subnet_prefix_len == 24);
    const uint8_t la[16] = {10, 0, 0, 5}, pa[16] = {10, 0, 0, 9}, sa[16] = {10, 0, 0, 0};
    CHECK(std::memcmp(r.local_addr, la, 16) == 0);
    CHECK(std::memcmp(r.peer_addr, pa, 16) == 0);
    CHECK(std::memcmp(r.subnet_addr, sa, 16) == 0);
    CHECK(r.speed_mbps == 200000);

    // IPv6 pairs with IPv6.
    weft_local_nic l6;
    std::memset(&l6, 0, sizeof l6);
    l6.index = 7;
    l6.family = WEFT_FAMILY_IPV6;
    l6.prefix_len = 64;
    l6.up = 1;
    const uint8_t a6[16] = {0xfd, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 5};
    const uint8_t p6[16] = {0xfd, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 9};
    std::memcpy(l6.addr, a6, 16);
    weft_mesh_handle peer6 = empty_handle(5001);
    peer6.count = 2;
    peer6.entries[0] = v4_entry(10, 0, 0, 9, 24);
    peer6.entries[1] = v6_entry(p6, 64);
    EXPECT(weft_select_nic(&l6, 1, &peer6, &r), WEFT_OK, "");
    CHECK(r.family == WEFT_FAMILY_IPV6 && r.peer_position == 1 && r.local_position == 0);
    CHECK(std::memcmp(r.peer_addr, p6, 16) == 0 && r.subnet_prefix_len == 64);

    // No shared subnet: the message lists what was compared.
    weft_mesh_handle far = empty_handle(5002);
    far.count = 1;
    far.entries[0] = v4_entry(172, 16, 0, 1, 24);
    weft_route untouched = r;
    EXPECT(weft_select_nic(local, 3, &far, &r), WEFT_ERR_NO_ROUTE, "172.16.0.1");
    CHECK(last_error().find("192.168.1.10") != std::string::npos);
    CHECK(std::memcmp(&untouched, &r, sizeof r) == 0);
    // The only matching NIC is down.
    weft_mesh_handle only_down = empty_handle(5003);
    only_down.count = 1;
    only_down.entries[0] = v4_entry(10, 0, 1, 7, 24);
    EXPECT(weft_select_nic(local, 3, &only_down, &r), WEFT_ERR_NO_ROUTE, "10.0.1.5");
    // No local NICs at all.
    EXPECT(weft_select_nic(local, 0, &peer, &r), WEFT_ERR_NO_ROUTE, "weft_select_nic: ");

    weft_local_nic bad_up = local[0];
    bad_up.up = 2;
    EXPECT(weft_select_nic(&bad_up, 1, &peer, &r), WEFT_ERR_BAD_FIELD,
           "argument `local[0].up` = 2 is invalid: expected 0 or 1");
    weft_local_nic bad_family = local[0];
    bad_family.family = 0;
    EXPECT(weft_select_nic(&bad_family, 1, &peer, &r), WEFT_ERR_BAD_FAMILY,
           "local[0].family = 0");
    weft_local_nic bad_prefix = local[0];
    bad_prefix.prefix_len = 33;
    EXPECT(weft_select_nic(&bad_prefix, 1, &peer, &r), WEFT_ERR_BAD_FIELD,
           "argument `local[0].prefix_len` = 33 is invalid: expected at most 32");
    weft_mesh_handle peer_bad_prefix = peer;
    peer_bad_prefix.entries[1].prefix_len = 40;
    EXPECT(weft_select_nic(local, 3, &peer_bad_prefix, &r), WEFT_ERR_BAD_FIELD,
           "peer->entries[1]: prefix_len: invalid value 40");
    weft_mesh_handle too_many = peer;
    too_many.count = 12;
    EXPECT(weft_select_nic(local, 3, &too_many, &r), WEFT_ERR_TOO_MANY, "peer->count = 12");
    weft_mesh_handle bad_peer = peer;
    bad_peer.entries[2].family = 9;
    EXPECT(weft_select_nic(local, 3, &bad_peer, &r), WEFT_ERR_BAD_FAMILY,
           "peer->entries[2].family = 9");
    EXPECT(weft_select_nic(nullptr, 3, &peer, &r), WEFT_ERR_NULL_ARG, "argument `local` is NULL");
    EXPECT(weft_select_nic(local, 3, nullptr, &r), WEFT_ERR_NULL_ARG, "argument `peer` is NULL");
    EXPECT(weft_select_nic(local, 3, &peer, nullptr), WEFT_ERR_NULL_ARG, "argument `out` is NULL");
}

}  // namespace

int main() {
    test_versions_and_layout();
    test_status_strings();
    test_data_types();
    test_red_ops();
    test_last_error_semantics();
    test_validate();
    test_mesh_exact_bytes();
    test_mesh_round_trip_random();
    test_mesh_encode_errors();
    test_mesh_decode_errors();
    test_select_nic();
    std::printf("%d passed, %d failed\n", passed, failed);
    return failed == 0 && passed > 0 ? 0 : 1;
}
