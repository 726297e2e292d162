/* Drives libnccl-net-weft.so the way NCCL does: dlopen + dlsym of each exported
 * ncclNetPlugin_vN, then init, devices, getProperties, polling listen/connect/accept loops,
 * isend/irecv (tags, grouped receives), test, iflush, regMr/deregMr and close, checking every
 * byte and every reported size, the request limit, the errors (size and tag mismatch,
 * malformed handles, CUDA memory, bad arguments) and closing in every order.
 *
 *   harness /path/to/libnccl-net-weft.so      (prints "N passed, M failed"; exit 1 on failure)
 *   harness /path/to/libnccl-net-weft.so --two-process
 *   harness /path/to/libnccl-net-weft.so --bench [connections] [MiB per connection] [msg KiB]
 *   harness /path/to/libnccl-net-weft.so --peer DIR recv|send
 *
 * The first form runs everything on loopback in one thread, as NCCL's proxy thread would. The
 * second forks before loading the library: the child listens and receives, the parent connects
 * and sends (the handle travels through a pipe, as NCCL's bootstrap would carry it), then the
 * child is killed with SIGKILL during a 256 MiB transfer and the parent's request must fail.
 * The third measures throughput the way NCCL's proxy drives a 2-rank ring: two processes, each
 * sending to and receiving from the other over several connections, 8 messages in flight per
 * connection (defaults: 2 connections, 2048 MiB, 512 KiB messages); it uses the caller's
 * environment (NCCL_SOCKET_NTHREADS, WEFT_SOCKET_NTHREADS, ...), loopback unless
 * NCCL_SOCKET_IFNAME is set. The fourth is the second across hosts, one process per host: the
 * receiver writes its listen handle to DIR/handle (DIR shared by both hosts), the sender reads
 * it, connects and sends messages of 1 B to 16 MiB (odd sizes), then a grouped receive of 4
 * with shuffled tags; each process checks its side (the receiver every
 * byte and size) and prints "N passed, M failed"; no process is killed.
 * Every wait has a deadline. Set HARNESS_VERBOSE=1 to see the plugin's log lines.
 * HARNESS_BACKEND=ib (with WEFT_NET_BACKEND=ib) checks the verbs backend (=mesh: the mesh
 * backend over verbs, one device named "mesh"; =mesh-socket: the mesh backend over sockets,
 * whose checks are the socket backend's), whose sends are
 * posted only once the receiver has posted (NCCL's IB protocol) and whose size and tag
 * checks fail the isend itself, as NCCL's own IB transport does. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "nccl_net_abi.h"

#define DEADLINE_S 60.0
#define MAX_RECVS_WEFT 8

static ncclNet_v11_t* n11;
static ncclNet_v10_t* n10;
static ncclNet_v9_t* n9;
static ncclNet_v8_t* n8;
static void* ctx;

/* ---- the logger NCCL would pass: keeps the last 256 KiB of messages ---- */
static char logbuf[256 * 1024];
static size_t loglen;
static int verbose;
static int ib;   /* HARNESS_BACKEND=ib or mesh: the verbs protocol */
static int mesh; /* HARNESS_BACKEND=mesh or mesh-socket: one device named "mesh" */

static void logger(int level, unsigned long flags, const char* file, int line, const char* fmt,
                   ...) {
  char msg[4096];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  if (verbose) fprintf(stderr, "[log %d %#lx %s:%d] %s\n", level, flags, file, line, msg);
  size_t len = strlen(msg);
  if (loglen + len + 2 > sizeof logbuf) loglen = 0;
  memcpy(logbuf + loglen, msg, len);
  loglen += len;
  logbuf[loglen++] = '\n';
  logbuf[loglen] = '\0';
}

static int log_has(const char* needle) { return strstr(logbuf, needle) != NULL; }
static const char* log_tail(void) { return loglen > 400 ? logbuf + loglen - 400 : logbuf; }
static void log_clear(void) {
  loglen = 0;
  logbuf[0] = '\0';
}

/* ---- helpers ---- */
static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static uint64_t next_rand(void) {
  rng ^= rng << 13;
  rng ^= rng >> 7;
  rng ^= rng << 17;
  return rng;
}
static void fill_random(unsigned char* p, size_t n) {
  for (size_t i = 0; i < n; i++) p[i] = (unsigned char)(next_rand() >> 24);
}

static char failure[1024];
#define CHECK(cond, ...)                                                     \
  do {                                                                       \
    if (!(cond)) {                                                           \
      int at_ = snprintf(failure, sizeof failure, "line %d: ", __LINE__);    \
      snprintf(failure + at_, sizeof failure - (size_t)at_, __VA_ARGS__);    \
      return 1;                                                              \
    }                                                                        \
  } while (0)
#define CHECK_OK(call) CHECK((call) == ncclSuccess, "%s failed", #call)

/* Polls connect and accept alternately (as NCCL's proxy does) until both give a comm. */
static int connect_pair(void** send, void** recv, void** listen_out) {
  char handle[NCCL_NET_HANDLE_MAXSIZE];
  void* listen = NULL;
  memset(handle, 0, sizeof handle);
  CHECK_OK(n11->listen(ctx, 0, handle, &listen));
  CHECK(listen != NULL, "listen returned success with a NULL listenComm");
  *send = NULL;
  *recv = NULL;
  double start = now();
  while (*send == NULL || *recv == NULL) {
    CHECK(now() - start < DEADLINE_S, "handshake did not finish in %.0f s", DEADLINE_S);
    if (*send == NULL) {
      double t = now();
      CHECK_OK(n11->connect(ctx, 0, handle, send, NULL));
      CHECK(now() - t < 1.0, "connect blocked for %.2f s", now() - t);
    }
    if (*recv == NULL) {
      double t = now();
      CHECK_OK(n11->accept(listen, recv, NULL));
      CHECK(now() - t < 1.0, "accept blocked for %.2f s", now() - t);
    }
  }
  if (listen_out)
    *listen_out = listen;
  else
    CHECK_OK(n11->closeListen(listen));
  return 0;
}

/* Tests requests round-robin until each is done or failed. rc[i] gets test's result, sizes
 * row i the reported sizes (NULL row pointers allowed: NCCL may pass sizes == NULL). */
static int wait_all(void** reqs, int n, int** sizes, ncclResult_t* rc) {
  int left = n;
  int* done = calloc((size_t)n, sizeof(int));
  for (int i = 0; i < n; i++) rc[i] = ncclSuccess;
  double start = now();
  while (left > 0) {
    if (now() - start > DEADLINE_S) {
      free(done);
      CHECK(0, "%d of %d requests did not complete in %.0f s", left, n, DEADLINE_S);
    }
    for (int i = 0; i < n; i++) {
      if (done[i]) continue;
      int d = 0;
      rc[i] = n11->test(reqs[i], &d, sizes ? sizes[i] : NULL);
      if (rc[i] != ncclSuccess || d) {
        done[i] = 1;
        left--;
      }
    }
  }
  free(done);
  return 0;
}

/* One transfer of `size` bytes into a buffer of `cap` bytes, every byte checked. */
static int transfer(void* send, void* recv, size_t size, size_t cap, int tag, int optional) {
  unsigned char* src = malloc(size ? size : 1);
  unsigned char* dst = malloc(cap ? cap : 1);
  CHECK(src && dst, "out of memory for %zu bytes", size);
  fill_random(src, size);
  memset(dst, 0xa5, cap);
  void *smr = NULL, *rmr = NULL;
  CHECK_OK(n11->regMr(send, src, size, NCCL_PTR_HOST, &smr));
  CHECK_OK(n11->regMr(recv, dst, cap, NCCL_PTR_HOST, &rmr));
  void* reqs[2] = {NULL, NULL};
  void* data = dst;
  int tags[1] = {tag};
  /* NCCL 2.28 may pass NCCL_NET_OPTIONAL_RECV_COMPLETION in *request for LL protocols. */
  if (optional) reqs[1] = (void*)NCCL_NET_OPTIONAL_RECV_COMPLETION;
  CHECK_OK(n11->irecv(recv, 1, &data, &cap, tags, &rmr, NULL, &reqs[1]));
  CHECK(reqs[1] != NULL && reqs[1] != (void*)NCCL_NET_OPTIONAL_RECV_COMPLETION,
        "irecv gave no request");
  CHECK_OK(n11->isend(send, src, size, tag, smr, NULL, &reqs[0]));
  /* Verbs: the receiver's FIFO entry is an RDMA write that may still be on its way. */
  for (double start = now(); ib && !reqs[0] && now() - start < DEADLINE_S;)
    CHECK_OK(n11->isend(send, src, size, tag, smr, NULL, &reqs[0]));
  CHECK(reqs[0] != NULL, "isend gave no request with nothing in flight");
  int ss[1] = {-1}, rs[1] = {-1};
  int* sizes[2] = {ss, rs};
  ncclResult_t rc[2];
  if (wait_all(reqs, 2, sizes, rc)) return 1;
  CHECK(rc[0] == ncclSuccess && rc[1] == ncclSuccess, "test failed: send %d recv %d", rc[0],
        rc[1]);
  CHECK(ss[0] == (int)size && rs[0] == (int)size, "sizes reported: send %d recv %d, sent %zu",
        ss[0], rs[0], size);
  CHECK(memcmp(src, dst, size) == 0, "%zu bytes differ", size);
  for (size_t i = size; i < cap; i++)
    CHECK(dst[i] == 0xa5, "byte %zu past the message (of %zu) was written", i, size);
  CHECK_OK(n11->deregMr(send, smr));
  CHECK_OK(n11->deregMr(recv, rmr));
  free(src);
  free(dst);
  return 0;
}

/* ---- the tests ---- */

static int t_symbols(void) {
  CHECK(n11 && n10 && n9 && n8, "missing symbol: v11 %p v10 %p v9 %p v8 %p", (void*)n11,
        (void*)n10, (void*)n9, (void*)n8);
  CHECK(strcmp(n11->name, "weft") == 0 && strcmp(n10->name, "weft") == 0 &&
            strcmp(n9->name, "weft") == 0 && strcmp(n8->name, "weft") == 0,
        "plugin names: %s %s %s %s", n11->name, n10->name, n9->name, n8->name);
  CHECK(n11->init && n11->devices && n11->getProperties && n11->listen && n11->connect &&
            n11->accept && n11->regMr && n11->deregMr && n11->isend && n11->irecv &&
            n11->iflush && n11->test && n11->closeSend && n11->closeRecv && n11->closeListen &&
            n11->finalize,
        "a required v11 function is NULL");
  CHECK(n11->getDeviceMr == NULL && n11->irecvConsumed == NULL,
        "host-only plugin must leave device networking NULL");
  return 0;
}

static int t_init_and_properties(void) {
  void* ctx2 = NULL;
  ncclNetCommConfig_t config = {-1};
  CHECK_OK(n11->init(&ctx, 0x1234, &config, logger, NULL));
  CHECK_OK(n11->init(&ctx2, 0x5678, &config, logger, NULL));
  CHECK(ctx && ctx2 && ctx != ctx2, "init contexts %p %p", ctx, ctx2);
  CHECK_OK(n11->finalize(ctx2));
  CHECK(log_has("NET/weft") && log_has(mesh ? "Mesh backend" : ib ? "IB backend" : "Socket backend"),
        "no init message in the log:\n%.400s", log_tail());
  /* The harness set NCCL_SOCKET_NTHREADS=2 NCCL_NSOCKS_PERTHREAD=3. */
  if (!ib)
    CHECK(log_has("2 threads x 3 sockets"), "NCCL's socket variables not honoured:\n%.400s",
          log_tail());
  int ndev = 0;
  CHECK_OK(n11->devices(&ndev));
  CHECK(ndev == 1, "%d devices with NCCL_SOCKET_IFNAME=lo (or NCCL_IB_HCA)", ndev);
  ncclNetProperties_v11_t p;
  memset(&p, 0x5a, sizeof p);
  CHECK_OK(n11->getProperties(0, &p));
  /* Verbs: a Soft-RoCE device (rxe*, no PCI device, port 1). */
  const char* name = mesh ? "mesh" : ib ? "rxe" : "lo";
  CHECK(p.name && strncmp(p.name, name, strlen(name)) == 0, "name %s", p.name ? p.name : "(null)");
  CHECK(p.pciPath == NULL, "%s has no PCI path, got %s", name, p.pciPath);
  CHECK(p.ptrSupport == NCCL_PTR_HOST, "ptrSupport %#x", p.ptrSupport);
  CHECK(p.speed > 0 && p.maxComms > 0 && p.maxRecvs == MAX_RECVS_WEFT &&
            p.port == (ib || mesh ? 1 : 0),
        "speed %d maxComms %d maxRecvs %d port %d", p.speed, p.maxComms, p.maxRecvs, p.port);
  CHECK(p.latency >= 0.0f && p.forceFlush == 0 && p.netDeviceType == 0 &&
            p.netDeviceVersion == 0,
        "latency %f forceFlush %d type %d version %d", p.latency, p.forceFlush, p.netDeviceType,
        p.netDeviceVersion);
  CHECK(p.vProps.ndevs == 1 && p.vProps.devs[0] == 0, "vProps %d [%d]", p.vProps.ndevs,
        p.vProps.devs[0]);
  CHECK(p.maxP2pBytes >= (1u << 30) && p.maxCollBytes > 0 && p.maxMultiRequestSize == 1,
        "maxP2pBytes %zu maxCollBytes %zu maxMultiRequestSize %d", p.maxP2pBytes, p.maxCollBytes,
        p.maxMultiRequestSize);
  CHECK(n11->getProperties(1, &p) != ncclSuccess, "properties of device 1 of 1");
  CHECK(n11->getProperties(-1, &p) != ncclSuccess, "properties of device -1");

  /* The older tables report the same device. */
  CHECK_OK(n8->init(logger));
  CHECK_OK(n9->init(logger));
  CHECK_OK(n10->init(logger, NULL));
  ncclNetProperties_v8_t p8;
  ncclNetProperties_v9_t p9, p10;
  CHECK_OK(n8->getProperties(0, &p8));
  CHECK_OK(n9->getProperties(0, &p9));
  CHECK_OK(n10->getProperties(0, &p10));
  CHECK(strcmp(p8.name, p.name) == 0 && p8.ptrSupport == NCCL_PTR_HOST && p8.speed == p.speed &&
            p8.maxRecvs == p.maxRecvs && p8.maxComms == p.maxComms,
        "v8 properties differ");
  CHECK(strcmp(p9.name, p.name) == 0 && p9.maxP2pBytes == p.maxP2pBytes &&
            p9.vProps.ndevs == 1 && p10.speed == p.speed && p10.maxRecvs == p.maxRecvs,
        "v9/v10 properties differ");
  return 0;
}

static int t_nonblocking_handshake(void) {
  char handle[NCCL_NET_HANDLE_MAXSIZE];
  void *listen = NULL, *send = NULL, *recv = NULL;
  CHECK_OK(n11->listen(ctx, 0, handle, &listen));
  /* Nobody connected yet: accept must return at once with no comm. */
  for (int i = 0; i < 3; i++) {
    double t = now();
    CHECK_OK(n11->accept(listen, &recv, NULL));
    CHECK(recv == NULL && now() - t < 0.5, "accept with no connector: %p after %.2f s", recv,
          now() - t);
  }
  /* The first connect cannot finish without the accept side: it returns NULL at once. */
  double t = now();
  CHECK_OK(n11->connect(ctx, 0, handle, &send, NULL));
  CHECK(now() - t < 0.5, "first connect blocked %.2f s", now() - t);
  int polls = 0;
  double start = now();
  while (send == NULL || recv == NULL) {
    CHECK(now() - start < DEADLINE_S, "handshake did not finish");
    if (send == NULL) CHECK_OK(n11->connect(ctx, 0, handle, &send, NULL));
    if (recv == NULL) CHECK_OK(n11->accept(listen, &recv, NULL));
    polls++;
  }
  CHECK(polls >= 1, "no polling");
  /* A second connection through the same listen comm. */
  void *send2 = NULL, *recv2 = NULL;
  char handle2[NCCL_NET_HANDLE_MAXSIZE];
  memcpy(handle2, handle, sizeof handle);
  start = now();
  while (send2 == NULL || recv2 == NULL) {
    CHECK(now() - start < DEADLINE_S, "second handshake did not finish");
    if (send2 == NULL) CHECK_OK(n11->connect(ctx, 0, handle2, &send2, NULL));
    if (recv2 == NULL) CHECK_OK(n11->accept(listen, &recv2, NULL));
  }
  if (transfer(send2, recv2, 1000, 1000, 5, 0)) return 1;
  if (transfer(send, recv, 777, 1000, 6, 0)) return 1;
  CHECK_OK(n11->closeListen(listen));
  CHECK_OK(n11->closeSend(send));
  CHECK_OK(n11->closeRecv(recv));
  CHECK_OK(n11->closeSend(send2));
  CHECK_OK(n11->closeRecv(recv2));
  return 0;
}

static int t_sizes(void) {
  void *send, *recv;
  if (connect_pair(&send, &recv, NULL)) return 1;
  const size_t sizes[] = {0,     1,       3,           4093,          32768,
                          32769, 65537,   1048576 + 3, 16777216 - 5, (64u << 20) + 11};
  for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
    size_t extra = (i % 3) * 17;
    if (transfer(send, recv, sizes[i], sizes[i] + extra, (int)i, (int)(i & 1))) {
      size_t at = strlen(failure);
      snprintf(failure + at, sizeof failure - at, " (size %zu)", sizes[i]);
      return 1;
    }
  }
  CHECK_OK(n11->closeSend(send));
  CHECK_OK(n11->closeRecv(recv));
  return 0;
}

/* isend, retried while the request is not posted: the verbs backend posts a send only once
 * the receiver's buffer arrived in its FIFO. Socket sends post at once. */
static ncclResult_t isend_posted(void* comm, void* data, size_t size, int tag, void* mr,
                                 void** req) {
  double start = now();
  for (;;) {
    *req = NULL;
    ncclResult_t rc = n11->isend(comm, data, size, tag, mr, NULL, req);
    if (rc != ncclSuccess || *req != NULL || now() - start > DEADLINE_S) return rc;
  }
}

static int t_grouped_receives(void) {
  void *send, *recv;
  if (connect_pair(&send, &recv, NULL)) return 1;
  for (int round = 0; round < 4; round++) {
    int n = round == 0 ? MAX_RECVS_WEFT : 2 + round * 2 - 1; /* 8, 3, 5, 7 */
    unsigned char *src[MAX_RECVS_WEFT], *dst[MAX_RECVS_WEFT];
    void *smr[MAX_RECVS_WEFT], *rmr[MAX_RECVS_WEFT], *data[MAX_RECVS_WEFT];
    size_t caps[MAX_RECVS_WEFT], lens[MAX_RECVS_WEFT];
    int tags[MAX_RECVS_WEFT], order[MAX_RECVS_WEFT];
    for (int i = 0; i < n; i++) {
      caps[i] = 1000 + (size_t)(next_rand() % 200000);
      lens[i] = caps[i] - (size_t)(next_rand() % 1000);
      tags[i] = 100 * round + 7 * i + 1;
      src[i] = malloc(lens[i]);
      dst[i] = malloc(caps[i]);
      fill_random(src[i], lens[i]);
      memset(dst[i], 0, caps[i]);
      data[i] = dst[i];
      order[i] = i;
      CHECK_OK(n11->regMr(send, src[i], lens[i], NCCL_PTR_HOST, &smr[i]));
      CHECK_OK(n11->regMr(recv, dst[i], caps[i], NCCL_PTR_HOST, &rmr[i]));
    }
    for (int i = n - 1; i > 0; i--) { /* sends go in a shuffled tag order */
      int j = (int)(next_rand() % (uint64_t)(i + 1));
      int t = order[i];
      order[i] = order[j];
      order[j] = t;
    }
    void* reqs[1 + MAX_RECVS_WEFT];
    CHECK_OK(n11->irecv(recv, n, data, caps, tags, rmr, NULL, &reqs[0]));
    CHECK(reqs[0] != NULL, "grouped irecv of %d not posted", n);
    for (int k = 0; k < n; k++) {
      int i = order[k];
      /* The verbs backend posts a send only once the receiver's buffers reached its FIFO:
       * right after irecv, a NULL request (try again) is NCCL's contract, not an error. */
      CHECK_OK(isend_posted(send, src[i], lens[i], tags[i], smr[i], &reqs[1 + k]));
      CHECK(reqs[1 + k] != NULL, "isend %d not posted", k);
    }
    int rsizes[MAX_RECVS_WEFT], ssizes[MAX_RECVS_WEFT][1];
    int* sizes[1 + MAX_RECVS_WEFT];
    sizes[0] = rsizes;
    for (int k = 0; k < n; k++) sizes[1 + k] = round == 1 ? NULL : ssizes[k];
    ncclResult_t rc[1 + MAX_RECVS_WEFT];
    if (wait_all(reqs, 1 + n, sizes, rc)) return 1;
    for (int k = 0; k <= n; k++) CHECK(rc[k] == ncclSuccess, "request %d failed: %d", k, rc[k]);
    for (int i = 0; i < n; i++) {
      CHECK(rsizes[i] == (int)lens[i], "group of %d, buffer %d (tag %d): size %d, sent %zu", n, i,
            tags[i], rsizes[i], lens[i]);
      CHECK(memcmp(src[i], dst[i], lens[i]) == 0, "group of %d, buffer %d: data differ", n, i);
      CHECK_OK(n11->deregMr(send, smr[i]));
      CHECK_OK(n11->deregMr(recv, rmr[i]));
      free(src[i]);
      free(dst[i]);
    }
    if (round != 1)
      for (int k = 0; k < n; k++)
        CHECK(ssizes[k][0] == (int)lens[order[k]], "send %d reported %d", k, ssizes[k][0]);
  }
  CHECK_OK(n11->closeSend(send));
  CHECK_OK(n11->closeRecv(recv));
  return 0;
}

static int t_request_limit(void) {
  void *send, *recv;
  if (connect_pair(&send, &recv, NULL)) return 1;
  enum { N = NCCL_NET_MAX_REQUESTS, LEN = 40000 };
  unsigned char* src = malloc((size_t)N * LEN);
  unsigned char* dst = malloc((size_t)N * LEN);
  fill_random(src, (size_t)N * LEN);
  memset(dst, 0, (size_t)N * LEN);
  void *smr, *rmr, *extra = NULL;
  CHECK_OK(n11->regMr(send, src, (size_t)N * LEN, NCCL_PTR_HOST, &smr));
  CHECK_OK(n11->regMr(recv, dst, (size_t)N * LEN, NCCL_PTR_HOST, &rmr));
  void* reqs[2 * N];
  /* No receive posted yet: the sends cannot complete, so 32 are in flight and the 33rd
   * cannot be posted (NULL request, success). The verbs backend posts a send only once its
   * receive is posted, so there the receives go first. */
  for (int i = 0; i < N && !ib; i++) {
    CHECK_OK(n11->isend(send, src + (size_t)i * LEN, LEN - (size_t)i, i, smr, NULL, &reqs[i]));
    CHECK(reqs[i] != NULL, "isend %d of %d not posted", i, N);
  }
  if (!ib) {
    CHECK_OK(n11->isend(send, src, 10, N, smr, NULL, &extra));
    CHECK(extra == NULL, "isend number %d was posted: the limit is %d", N + 1, N);
  }
  for (int i = 0; i < N; i++) {
    void* d = dst + (size_t)i * LEN;
    size_t cap = LEN;
    int tag = i;
    CHECK_OK(n11->irecv(recv, 1, &d, &cap, &tag, &rmr, NULL, &reqs[N + i]));
    CHECK(reqs[N + i] != NULL, "irecv %d of %d not posted", i, N);
  }
  void* d = dst;
  size_t cap = LEN;
  int tag = N;
  CHECK_OK(n11->irecv(recv, 1, &d, &cap, &tag, &rmr, NULL, &extra));
  CHECK(extra == NULL, "irecv number %d was posted: the limit is %d", N + 1, N);
  for (int i = 0; i < N && ib; i++) {
    /* Each receive's FIFO entry may still be on its way (an RDMA write): retried. */
    CHECK_OK(isend_posted(send, src + (size_t)i * LEN, LEN - (size_t)i, i, smr, &reqs[i]));
    CHECK(reqs[i] != NULL, "isend %d of %d not posted", i, N);
  }
  if (ib) {
    CHECK_OK(n11->isend(send, src, 10, N, smr, NULL, &extra));
    CHECK(extra == NULL, "isend number %d was posted: the limit is %d", N + 1, N);
  }
  int sz[2 * N][1];
  int* sizes[2 * N];
  for (int i = 0; i < 2 * N; i++) sizes[i] = sz[i];
  ncclResult_t rc[2 * N];
  if (wait_all(reqs, 2 * N, sizes, rc)) return 1;
  for (int i = 0; i < N; i++) {
    CHECK(rc[i] == ncclSuccess && rc[N + i] == ncclSuccess, "message %d failed", i);
    CHECK(sz[N + i][0] == LEN - i && sz[i][0] == LEN - i, "message %d sizes %d %d", i, sz[i][0],
          sz[N + i][0]);
    CHECK(memcmp(src + (size_t)i * LEN, dst + (size_t)i * LEN, (size_t)(LEN - i)) == 0,
          "message %d differs", i);
  }
  /* Slots are free again. */
  if (transfer(send, recv, 12345, 20000, 99, 0)) return 1;
  CHECK_OK(n11->deregMr(send, smr));
  CHECK_OK(n11->deregMr(recv, rmr));
  free(src);
  free(dst);
  CHECK_OK(n11->closeSend(send));
  CHECK_OK(n11->closeRecv(recv));
  return 0;
}

static int t_mismatch(int tag_mismatch) {
  void *send, *recv;
  if (connect_pair(&send, &recv, NULL)) return 1;
  static unsigned char src[4001], dst[2][1000];
  void *smr, *rmr;
  CHECK_OK(n11->regMr(send, src, sizeof src, NCCL_PTR_HOST, &smr));
  CHECK_OK(n11->regMr(recv, dst, sizeof dst, NCCL_PTR_HOST, &rmr));
  void* data[2] = {dst[0], dst[1]};
  size_t caps[2] = {1000, 1000};
  int tags[2] = {1, 2};
  void* rmrs[2] = {rmr, rmr};
  void* reqs[2];
  log_clear();
  CHECK_OK(n11->irecv(recv, tag_mismatch ? 2 : 1, data, caps, tags, rmrs, NULL, &reqs[1]));
  size_t len = tag_mismatch ? 10 : sizeof src;
  ncclResult_t rc[2];
  int s0[2], s1[2];
  int* sizes[2] = {s0, s1};
  if (ib) {
    /* The sender sees the receiver's buffers before it writes: its isend fails. */
    double start = now();
    do {
      reqs[0] = NULL;
      rc[0] = n11->isend(send, src, len, tag_mismatch ? 9 : 1, smr, NULL, &reqs[0]);
    } while (rc[0] == ncclSuccess && reqs[0] == NULL && now() - start < DEADLINE_S);
    CHECK(rc[0] != ncclSuccess, "a mismatched isend succeeded");
    CHECK(reqs[1], "not posted");
    if (wait_all(&reqs[1], 1, &sizes[1], &rc[1])) return 1;
  } else {
    CHECK_OK(n11->isend(send, src, len, tag_mismatch ? 9 : 1, smr, NULL, &reqs[0]));
    CHECK(reqs[0] && reqs[1], "not posted");
    if (wait_all(reqs, 2, sizes, rc)) return 1;
  }
  CHECK(rc[0] == ncclInvalidUsage && rc[1] == ncclInvalidUsage,
        "mismatch must fail both ends with ncclInvalidUsage: send %d recv %d", rc[0], rc[1]);
  if (tag_mismatch)
    CHECK(log_has("tag") && log_has("9"), "the error does not name the tag:\n%.400s", log_tail());
  else
    CHECK(log_has("4001") && log_has("1000"), "the error does not give both sizes:\n%.400s", log_tail());
  /* The comms are dead: posting fails with an error, not a hang. */
  void* r = NULL;
  CHECK(n11->isend(send, src, 1, 1, smr, NULL, &r) != ncclSuccess && r == NULL,
        "isend on a failed comm");
  CHECK_OK(n11->deregMr(send, smr));
  CHECK_OK(n11->deregMr(recv, rmr));
  CHECK_OK(n11->closeSend(send));
  CHECK_OK(n11->closeRecv(recv));
  return 0;
}
static int t_size_mismatch(void) { return t_mismatch(0); }
static int t_tag_mismatch(void) { return t_mismatch(1); }

/* Closing in every order, with and without requests in flight. */
static int t_close_orders(void) {
  static unsigned char buf[3 << 20], out[3 << 20];
  for (int order = 0; order < 6; order++) {
    void *send, *recv, *listen;
    if (connect_pair(&send, &recv, &listen)) return 1;
    if (order == 0) { /* listen, send, recv after a transfer */
      CHECK_OK(n11->closeListen(listen));
      if (transfer(send, recv, 5000, 5000, 1, 0)) return 1;
      CHECK_OK(n11->closeSend(send));
      CHECK_OK(n11->closeRecv(recv));
    } else if (order == 1) { /* recv, send, listen */
      if (transfer(send, recv, 70000, 70001, 1, 0)) return 1;
      CHECK_OK(n11->closeRecv(recv));
      CHECK_OK(n11->closeSend(send));
      CHECK_OK(n11->closeListen(listen));
    } else if (order == 2) { /* send, listen, recv */
      CHECK_OK(n11->closeSend(send));
      CHECK_OK(n11->closeListen(listen));
      CHECK_OK(n11->closeRecv(recv));
    } else {
      /* A request in flight when a comm closes: its test fails, the peer's request fails,
       * nothing hangs. order 3: receiver closes with a receive posted; 4: sender closes with a
       * large send half done; 5: receiver closes while a large send is pending at the peer. */
      CHECK_OK(n11->closeListen(listen));
      void *smr, *rmr, *sreq = NULL, *rreq = NULL;
      CHECK_OK(n11->regMr(send, buf, sizeof buf, NCCL_PTR_HOST, &smr));
      CHECK_OK(n11->regMr(recv, out, sizeof out, NCCL_PTR_HOST, &rmr));
      void* d = out;
      size_t cap = sizeof out;
      int tag = 3;
      if (order != 5) CHECK_OK(n11->irecv(recv, 1, &d, &cap, &tag, &rmr, NULL, &rreq));
      if (order != 3) CHECK_OK(n11->isend(send, buf, sizeof buf, 3, smr, NULL, &sreq));
      int done = 0;
      if (order == 4) {
        CHECK_OK(n11->deregMr(send, smr));
        CHECK_OK(n11->closeSend(send));
        ncclResult_t rc[1];
        if (wait_all(&rreq, 1, NULL, rc)) return 1;
        /* The data may even have arrived in full before the close; otherwise an error. */
        if (rc[0] == ncclSuccess) CHECK(memcmp(buf, out, sizeof buf) == 0, "data differ");
        CHECK_OK(n11->deregMr(recv, rmr));
        CHECK_OK(n11->closeRecv(recv));
      } else {
        CHECK_OK(n11->deregMr(recv, rmr));
        CHECK_OK(n11->closeRecv(recv));
        if (rreq) {
          ncclResult_t rc = n11->test(rreq, &done, NULL);
          CHECK(rc != ncclSuccess && !done, "test of a receive on a closed comm: rc %d done %d",
                rc, done);
        }
        if (sreq) {
          ncclResult_t rc[1];
          if (wait_all(&sreq, 1, NULL, rc)) return 1;
          CHECK(rc[0] == ncclRemoteError, "pending send after the peer closed: rc %d", rc[0]);
        }
        CHECK_OK(n11->deregMr(send, smr));
        CHECK_OK(n11->closeSend(send));
      }
    }
  }
  /* A listen comm closed while a connect to it is under way: connect fails, no hang. */
  char handle[NCCL_NET_HANDLE_MAXSIZE];
  void *listen = NULL, *send = NULL;
  CHECK_OK(n11->listen(ctx, 0, handle, &listen));
  CHECK_OK(n11->connect(ctx, 0, handle, &send, NULL));
  CHECK_OK(n11->closeListen(listen));
  ncclResult_t rc = ncclSuccess;
  double start = now();
  while (rc == ncclSuccess && send == NULL) {
    CHECK(now() - start < DEADLINE_S, "connect to a closed listener did not fail");
    rc = n11->connect(ctx, 0, handle, &send, NULL);
  }
  CHECK(rc != ncclSuccess && send == NULL, "connect to a closed listener: rc %d comm %p", rc,
        send);
  return 0;
}

static int t_malformed_handles(void) {
  char good[NCCL_NET_HANDLE_MAXSIZE], bad[NCCL_NET_HANDLE_MAXSIZE];
  void *listen = NULL, *send = NULL;
  CHECK_OK(n11->listen(ctx, 0, good, &listen));
  for (int kind = 0; kind < 5; kind++) {
    memcpy(bad, good, sizeof bad);
    const char* what = "";
    if (kind == 0) {
      memset(bad, 0, sizeof bad);
      what = "all zero";
    } else if (kind == 1) {
      fill_random((unsigned char*)bad, sizeof bad);
      what = "random";
    } else if (kind == 2) {
      bad[0] ^= 0x40;
      what = "magic changed";
    } else if (kind == 3) {
      bad[4] ^= 0x7f;
      bad[5] ^= 0x7f;
      what = "version changed";
    } else {
      memset(bad + 8, 0xff, 32);
      what = "fields overwritten";
    }
    log_clear();
    send = NULL;
    ncclResult_t rc = ncclSuccess;
    double start = now();
    while (rc == ncclSuccess && send == NULL) {
      CHECK(now() - start < DEADLINE_S, "malformed handle (%s) neither failed nor connected",
            what);
      rc = n11->connect(ctx, 0, bad, &send, NULL);
    }
    CHECK(rc != ncclSuccess && send == NULL, "malformed handle (%s) accepted: rc %d", what, rc);
    CHECK(log_has("connect"), "no message for the malformed handle (%s):\n%.400s", what, log_tail());
  }
  /* The listener is still fine. */
  void* recv = NULL;
  send = NULL;
  double start = now();
  while (send == NULL || recv == NULL) {
    CHECK(now() - start < DEADLINE_S, "handshake after malformed handles");
    if (send == NULL) CHECK_OK(n11->connect(ctx, 0, good, &send, NULL));
    if (recv == NULL) CHECK_OK(n11->accept(listen, &recv, NULL));
  }
  if (transfer(send, recv, 3333, 4444, 1, 0)) return 1;
  CHECK_OK(n11->closeSend(send));
  CHECK_OK(n11->closeRecv(recv));
  CHECK_OK(n11->closeListen(listen));
  return 0;
}

static int t_bad_arguments(void) {
  void *send, *recv;
  if (connect_pair(&send, &recv, NULL)) return 1;
  static unsigned char buf[4096];
  void* mr = (void*)0x1;
  log_clear();
  CHECK(n11->regMr(send, buf, sizeof buf, NCCL_PTR_CUDA, &mr) != ncclSuccess && mr == NULL,
        "CUDA registration accepted");
  CHECK(log_has("CUDA"), "the CUDA refusal does not say why:\n%.400s", log_tail());
  mr = (void*)0x1;
  CHECK(n11->regMr(send, buf, sizeof buf, 0x8, &mr) != ncclSuccess && mr == NULL,
        "unknown memory type accepted");
  mr = (void*)0x1;
  CHECK(n11->regMrDmaBuf == NULL ||
            (n11->regMrDmaBuf(send, buf, sizeof buf, NCCL_PTR_CUDA, 0, 3, &mr) != ncclSuccess &&
             mr == NULL),
        "DMA-BUF registration accepted");
  void *smr, *rmr, *req = (void*)0x1;
  CHECK_OK(n11->regMr(send, buf, sizeof buf, NCCL_PTR_HOST, &smr));
  CHECK_OK(n11->regMr(recv, buf, sizeof buf, NCCL_PTR_HOST, &rmr));
  CHECK(n11->isend(send, buf, 10, 0, NULL, NULL, &req) != ncclSuccess && req == NULL,
        "isend without a registration");
  CHECK(n11->isend(recv, buf, 10, 0, smr, NULL, &req) != ncclSuccess && req == NULL,
        "isend on a receive comm");
  void* data[MAX_RECVS_WEFT + 1];
  size_t caps[MAX_RECVS_WEFT + 1];
  int tags[MAX_RECVS_WEFT + 1];
  void* mrs[MAX_RECVS_WEFT + 1];
  for (int i = 0; i <= MAX_RECVS_WEFT; i++) {
    data[i] = buf;
    caps[i] = 16;
    tags[i] = i;
    mrs[i] = rmr;
  }
  CHECK(n11->irecv(recv, 0, data, caps, tags, mrs, NULL, &req) != ncclSuccess && req == NULL,
        "irecv with n = 0");
  CHECK(n11->irecv(recv, MAX_RECVS_WEFT + 1, data, caps, tags, mrs, NULL, &req) != ncclSuccess,
        "irecv with n > maxRecvs");
  int done = 7;
  CHECK(n11->test(NULL, &done, NULL) != ncclSuccess && done == 0, "test(NULL)");
  CHECK(n11->closeSend(NULL) != ncclSuccess, "closeSend(NULL)");
  CHECK(n11->closeSend(recv) != ncclSuccess, "closeSend of a receive comm");
  CHECK(n11->listen(ctx, 5, buf, &req) != ncclSuccess && req == NULL, "listen on device 5");
  /* iflush of host memory: nothing to wait for, NCCL takes a NULL request as complete. */
  int isize = 16;
  req = (void*)0x1;
  CHECK_OK(n11->iflush(recv, 1, data, &isize, mrs, &req));
  CHECK(req == NULL, "iflush of host memory returned a request");
  /* The comms still work after all these refusals. */
  if (transfer(send, recv, 100, 100, 1, 0)) return 1;
  CHECK_OK(n11->deregMr(send, smr));
  CHECK_OK(n11->deregMr(recv, rmr));
  CHECK_OK(n11->closeSend(send));
  CHECK_OK(n11->closeRecv(recv));
  return 0;
}

/* The older tables end to end: int sizes (v8), size_t sizes (v9), config + profiler handles
 * (v10). */
static int t_older_versions(void) {
  for (int v = 8; v <= 10; v++) {
    char handle[NCCL_NET_HANDLE_MAXSIZE];
    void *listen = NULL, *send = NULL, *recv = NULL;
    ncclNetCommConfig_t config = {-1};
    if (v == 8) CHECK_OK(n8->listen(0, handle, &listen));
    if (v == 9) CHECK_OK(n9->listen(0, handle, &listen));
    if (v == 10) CHECK_OK(n10->listen(0, handle, &listen));
    double start = now();
    while (send == NULL || recv == NULL) {
      CHECK(now() - start < DEADLINE_S, "v%d handshake", v);
      if (send == NULL) {
        if (v == 8) CHECK_OK(n8->connect(0, handle, &send, NULL));
        if (v == 9) CHECK_OK(n9->connect(0, handle, &send, NULL));
        if (v == 10) CHECK_OK(n10->connect(0, &config, handle, &send, NULL));
      }
      if (recv == NULL) CHECK_OK(n8->accept(listen, &recv, NULL));
    }
    size_t len = 1048576 + 5 + (size_t)v;
    unsigned char* src = malloc(len);
    unsigned char* dst = calloc(1, len + 64);
    fill_random(src, len);
    void *smr, *rmr, *reqs[2] = {NULL, NULL};
    CHECK_OK(n8->regMr(send, src, len, NCCL_PTR_HOST, &smr));
    CHECK_OK(n8->regMr(recv, dst, len + 64, NCCL_PTR_HOST, &rmr));
    void* d = dst;
    int tag = v;
    /* The send is retried while it is not posted, as isend_posted does: the verbs backend
     * posts a send only once the receiver's buffer arrived in its FIFO. */
    double posting = now();
    if (v == 8) {
      int cap = (int)len + 64;
      CHECK_OK(n8->irecv(recv, 1, &d, &cap, &tag, &rmr, &reqs[1]));
      do CHECK_OK(n8->isend(send, src, (int)len, v, smr, &reqs[0]));
      while (reqs[0] == NULL && now() - posting < DEADLINE_S);
      void* neg = (void*)0x1;
      CHECK(n8->isend(send, src, -1, v, smr, &neg) != ncclSuccess && neg == NULL,
            "v8 isend of a negative size");
    } else if (v == 9) {
      size_t cap = len + 64;
      CHECK_OK(n9->irecv(recv, 1, &d, &cap, &tag, &rmr, &reqs[1]));
      do CHECK_OK(n9->isend(send, src, len, v, smr, &reqs[0]));
      while (reqs[0] == NULL && now() - posting < DEADLINE_S);
    } else {
      size_t cap = len + 64;
      void* ph = NULL;
      CHECK_OK(n10->irecv(recv, 1, &d, &cap, &tag, &rmr, &ph, &reqs[1]));
      do CHECK_OK(n10->isend(send, src, len, v, smr, NULL, &reqs[0]));
      while (reqs[0] == NULL && now() - posting < DEADLINE_S);
    }
    CHECK(reqs[0] && reqs[1], "v%d: not posted", v);
    int ss[1], rs[1];
    int* sizes[2] = {ss, rs};
    ncclResult_t rc[2];
    if (wait_all(reqs, 2, sizes, rc)) return 1;
    CHECK(rc[0] == ncclSuccess && rc[1] == ncclSuccess, "v%d: test failed", v);
    CHECK(ss[0] == (int)len && rs[0] == (int)len, "v%d: sizes %d %d", v, ss[0], rs[0]);
    CHECK(memcmp(src, dst, len) == 0, "v%d: data differ", v);
    CHECK_OK(n8->deregMr(send, smr));
    CHECK_OK(n8->deregMr(recv, rmr));
    CHECK_OK(n8->closeSend(send));
    CHECK_OK(n8->closeRecv(recv));
    CHECK_OK(n8->closeListen(listen));
    free(src);
    free(dst);
  }
  return 0;
}

static int t_finalize(void) {
  CHECK_OK(n11->finalize(ctx));
  ctx = NULL;
  return 0;
}


/* ---- two processes ---- */

static int to_child_handle = -1, from_child = -1, to_child = -1;
static pid_t child_pid = -1;
static void* two_send;

/* Bytes that both processes compute from (seed, index). */
static void pattern(unsigned char* p, size_t n, uint64_t seed) {
  uint64_t x = seed * 0x9e3779b97f4a7c15ull + 1;
  for (size_t i = 0; i < n; i++) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    p[i] = (unsigned char)(x >> 32);
  }
}

static const size_t fork_sizes[] = {1, 65537, (64u << 20) + 11};
/* Across hosts (--peer): up to 16 MiB, emulated RDMA moves ~20 MB/s. */
static const size_t peer_sizes[] = {1, 4095, 65537, (1u << 20) + 3, (16u << 20) - 5};
static const size_t* two_sizes = fork_sizes;
static size_t two_nsizes = sizeof fork_sizes / sizeof fork_sizes[0];
static const int group_tags[4] = {11, 12, 13, 14};
static const size_t group_lens[4] = {1000, 2000, 300001, 5};
#define KILL_BYTES ((size_t)256 << 20)

static int write_all(int fd, const void* p, size_t n) {
  const char* c = p;
  while (n > 0) {
    ssize_t w = write(fd, c, n);
    if (w <= 0) return -1;
    c += w;
    n -= (size_t)w;
  }
  return 0;
}

/* Reads exactly n bytes, or a line when line != 0 (n is then the buffer size), with a
 * deadline. Returns 0 on success. */
static int read_deadline(int fd, char* p, size_t n, int line) {
  size_t got = 0;
  double start = now();
  while (got < n) {
    struct pollfd pfd = {fd, POLLIN, 0};
    int left_ms = (int)((DEADLINE_S - (now() - start)) * 1000);
    if (left_ms <= 0 || poll(&pfd, 1, left_ms) <= 0) return -1;
    ssize_t r = read(fd, p + got, line ? 1 : n - got);
    if (r <= 0) return -1;
    got += (size_t)r;
    if (line && p[got - 1] == '\n') {
      p[got - 1] = '\0';
      return 0;
    }
    if (line && got == n - 1) return -1;
  }
  return 0;
}

/* The child: receives what the parent sends, checks every byte, reports one line per stage. */
static int child_stage_receive(void* recv) {
  for (size_t k = 0; k < two_nsizes; k++) {
    size_t len = two_sizes[k], cap = len + 100;
    unsigned char* want = malloc(len);
    unsigned char* got = malloc(cap);
    CHECK(want && got, "out of memory");
    pattern(want, len, len);
    memset(got, 0, cap);
    void *mr, *req = NULL;
    void* d = got;
    int tag = (int)k;
    CHECK_OK(n11->regMr(recv, got, cap, NCCL_PTR_HOST, &mr));
    CHECK_OK(n11->irecv(recv, 1, &d, &cap, &tag, &mr, NULL, &req));
    int size = -1;
    int* sizes[1] = {&size};
    ncclResult_t rc[1];
    if (wait_all(&req, 1, sizes, rc)) return 1;
    CHECK(rc[0] == ncclSuccess && size == (int)len, "receive of %zu: rc %d size %d", len, rc[0],
          size);
    CHECK(memcmp(want, got, len) == 0, "receive of %zu: data differ", len);
    CHECK_OK(n11->deregMr(recv, mr));
    free(want);
    free(got);
  }
  return 0;
}

static int child_stage_group(void* recv) {
  unsigned char* bufs[4];
  void* data[4];
  size_t caps[4];
  int tags[4];
  void* mrs[4];
  for (int i = 0; i < 4; i++) {
    caps[i] = group_lens[i] + 7;
    bufs[i] = calloc(1, caps[i]);
    data[i] = bufs[i];
    tags[i] = group_tags[i];
    CHECK_OK(n11->regMr(recv, bufs[i], caps[i], NCCL_PTR_HOST, &mrs[i]));
  }
  void* req = NULL;
  CHECK_OK(n11->irecv(recv, 4, data, caps, tags, mrs, NULL, &req));
  int sz[4] = {-1, -1, -1, -1};
  int* sizes[1] = {sz};
  ncclResult_t rc[1];
  if (wait_all(&req, 1, sizes, rc)) return 1;
  CHECK(rc[0] == ncclSuccess, "grouped receive failed: %d", rc[0]);
  for (int i = 0; i < 4; i++) {
    unsigned char* want = malloc(group_lens[i]);
    pattern(want, group_lens[i], (uint64_t)group_tags[i]);
    CHECK(sz[i] == (int)group_lens[i], "buffer %d (tag %d): size %d, sent %zu", i, group_tags[i],
          sz[i], group_lens[i]);
    CHECK(memcmp(want, bufs[i], group_lens[i]) == 0, "buffer %d (tag %d): data differ", i,
          group_tags[i]);
    CHECK_OK(n11->deregMr(recv, mrs[i]));
    free(want);
    free(bufs[i]);
  }
  return 0;
}

static void report(int fd, const char* stage, int bad) {
  char line[1200];
  snprintf(line, sizeof line, "%s %s%s%s\n", bad ? "FAIL" : "ok", stage, bad ? ": " : "",
           bad ? failure : "");
  write_all(fd, line, strlen(line));
}

static int child_main(int handle_fd, int status_fd, int go_fd) {
  void* cctx = NULL;
  ncclNetCommConfig_t config = {-1};
  char handle[NCCL_NET_HANDLE_MAXSIZE];
  void *listen = NULL, *recv = NULL;
  if (!n11 || n11->init(&cctx, 2, &config, logger, NULL) != ncclSuccess ||
      n11->listen(cctx, 0, handle, &listen) != ncclSuccess)
    return 3;
  if (write_all(handle_fd, handle, sizeof handle)) return 4;
  double start = now();
  while (recv == NULL) {
    if (now() - start > DEADLINE_S || n11->accept(listen, &recv, NULL) != ncclSuccess) return 5;
  }
  report(status_fd, "receive", child_stage_receive(recv));
  report(status_fd, "group", child_stage_group(recv));
  /* Post a large receive, let some data arrive, then die without closing anything. */
  static unsigned char* big;
  big = malloc(KILL_BYTES);
  void *mr, *req = NULL, *d = big;
  size_t cap = KILL_BYTES;
  int tag = 99;
  if (n11->regMr(recv, big, cap, NCCL_PTR_HOST, &mr) != ncclSuccess ||
      n11->irecv(recv, 1, &d, &cap, &tag, &mr, NULL, &req) != ncclSuccess)
    return 6;
  write_all(status_fd, "posted\n", 7);
  /* The parent posts its send, then says go: the transfer is under way when we die. */
  char go;
  if (read_deadline(go_fd, &go, 1, 0)) return 8;
  usleep(10000);
  raise(SIGKILL);
  return 7;
}

static int parent_expect(const char* stage) {
  char line[1200];
  if (from_child < 0) return 0; /* --peer: the receiver checks and reports for itself */
  CHECK(read_deadline(from_child, line, sizeof line, 1) == 0,
        "no word from the receiving process about '%s'", stage);
  CHECK(strncmp(line, "ok ", 3) == 0, "receiving process: %.900s", line);
  return 0;
}

static int t2_handshake(void) {
  char handle[NCCL_NET_HANDLE_MAXSIZE];
  ncclNetCommConfig_t config = {-1};
  CHECK_OK(n11->init(&ctx, 1, &config, logger, NULL));
  CHECK(read_deadline(to_child_handle, handle, sizeof handle, 0) == 0,
        "no listen handle from the receiving process");
  two_send = NULL;
  double start = now();
  while (two_send == NULL) {
    CHECK(now() - start < DEADLINE_S, "connect to the other process did not finish");
    CHECK_OK(n11->connect(ctx, 0, handle, &two_send, NULL));
  }
  return 0;
}

static int t2_sizes(void) {
  CHECK(two_send, "no connection");
  for (size_t k = 0; k < two_nsizes; k++) {
    size_t len = two_sizes[k];
    unsigned char* src = malloc(len);
    pattern(src, len, len);
    void *mr, *req = NULL;
    CHECK_OK(n11->regMr(two_send, src, len, NCCL_PTR_HOST, &mr));
    CHECK_OK(isend_posted(two_send, src, len, (int)k, mr, &req));
    int size = -1;
    int* sizes[1] = {&size};
    ncclResult_t rc[1];
    if (wait_all(&req, 1, sizes, rc)) return 1;
    CHECK(rc[0] == ncclSuccess && size == (int)len, "send of %zu: rc %d size %d", len, rc[0],
          size);
    CHECK_OK(n11->deregMr(two_send, mr));
    free(src);
  }
  return parent_expect("receive");
}

static int t2_group(void) {
  CHECK(two_send, "no connection");
  const int order[4] = {2, 0, 3, 1};
  unsigned char* src[4];
  void *mrs[4], *reqs[4];
  for (int k = 0; k < 4; k++) {
    int i = order[k];
    src[k] = malloc(group_lens[i]);
    pattern(src[k], group_lens[i], (uint64_t)group_tags[i]);
    CHECK_OK(n11->regMr(two_send, src[k], group_lens[i], NCCL_PTR_HOST, &mrs[k]));
    CHECK_OK(isend_posted(two_send, src[k], group_lens[i], group_tags[i], mrs[k], &reqs[k]));
    CHECK(reqs[k], "isend %d not posted", k);
  }
  ncclResult_t rc[4];
  if (wait_all(reqs, 4, NULL, rc)) return 1;
  for (int k = 0; k < 4; k++) {
    CHECK(rc[k] == ncclSuccess, "send %d failed: %d", k, rc[k]);
    CHECK_OK(n11->deregMr(two_send, mrs[k]));
    free(src[k]);
  }
  return parent_expect("group");
}

static int t2_peer_killed(void) {
  CHECK(two_send, "no connection");
  unsigned char* src = malloc(KILL_BYTES);
  memset(src, 0x3c, KILL_BYTES);
  void *mr, *req = NULL;
  CHECK_OK(n11->regMr(two_send, src, KILL_BYTES, NCCL_PTR_HOST, &mr));
  char line[64];
  CHECK(read_deadline(from_child, line, sizeof line, 1) == 0 && strcmp(line, "posted") == 0,
        "the receiving process did not post its last receive");
  CHECK_OK(isend_posted(two_send, src, KILL_BYTES, 99, mr, &req));
  CHECK(req != NULL, "isend of 256 MiB not posted");
  int done = 0;
  ncclResult_t rc = n11->test(req, &done, NULL);
  CHECK(rc == ncclSuccess && !done, "256 MiB sent at once? rc %d done %d", rc, done);
  CHECK(write_all(to_child, "g", 1) == 0, "cannot tell the receiving process to go");
  double start = now();
  while (rc == ncclSuccess && !done) {
    CHECK(now() - start < DEADLINE_S, "a send to a killed process neither failed nor ended");
    rc = n11->test(req, &done, NULL);
  }
  CHECK(!done || rc != ncclSuccess, "256 MiB arrived at a process killed after 10 ms");
  CHECK(rc == ncclRemoteError || rc == ncclSystemError,
        "send to a killed peer: rc %d (expected ncclRemoteError or ncclSystemError)", rc);
  CHECK(log_has("peer"), "the error does not name the peer:\n%.400s", log_tail());
  CHECK_OK(n11->deregMr(two_send, mr));
  CHECK_OK(n11->closeSend(two_send));
  two_send = NULL;
  free(src);
  int status = 0;
  start = now();
  while (waitpid(child_pid, &status, WNOHANG) == 0) {
    CHECK(now() - start < DEADLINE_S, "the receiving process did not end");
    usleep(10000);
  }
  child_pid = -1;
  CHECK(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL,
        "the receiving process ended otherwise (status %#x)", status);
  CHECK_OK(n11->finalize(ctx));
  return 0;
}

/* ---- --peer: the two-process checks across hosts, the handle through a shared folder ---- */

static const char* peer_dir;
static void *peer_listen, *peer_recv;

static int p_recv_handshake(void) {
  char handle[NCCL_NET_HANDLE_MAXSIZE], path[4096], tmp[4096];
  ncclNetCommConfig_t config = {-1};
  CHECK_OK(n11->init(&ctx, 2, &config, logger, NULL));
  CHECK_OK(n11->listen(ctx, 0, handle, &peer_listen));
  snprintf(path, sizeof path, "%s/handle", peer_dir);
  snprintf(tmp, sizeof tmp, "%s/handle.tmp", peer_dir);
  FILE* f = fopen(tmp, "wb");
  CHECK(f && fwrite(handle, 1, sizeof handle, f) == sizeof handle && fclose(f) == 0,
        "cannot write %.400s", tmp);
  CHECK(rename(tmp, path) == 0, "cannot rename %.400s to %.400s", tmp, path);
  double start = now();
  while (peer_recv == NULL) {
    /* The sender starts on another host, maybe later: allow it the connect deadline twice. */
    CHECK(now() - start < 2 * DEADLINE_S, "no connection from the sending host");
    CHECK_OK(n11->accept(peer_listen, &peer_recv, NULL));
  }
  return 0;
}

static int p_recv_sizes(void) {
  CHECK(peer_recv, "no connection");
  return child_stage_receive(peer_recv);
}

static int p_recv_group(void) {
  CHECK(peer_recv, "no connection");
  return child_stage_group(peer_recv);
}

static int p_recv_close(void) {
  CHECK(peer_recv, "no connection");
  /* The sender's last writes complete only once this side acknowledged them: closing as soon
   * as the receives completed could destroy the connection under them (a send then failed
   * with ncclRemoteError on Soft-RoCE although every byte had arrived). NCCL never closes a
   * connection with the peer's operations in flight either: wait for the sender's word. */
  char path[4096];
  snprintf(path, sizeof path, "%s/sent", peer_dir);
  double start = now();
  while (access(path, F_OK) != 0) {
    CHECK(now() - start < DEADLINE_S, "the sender never said its sends completed (%.400s)", path);
    usleep(20000);
  }
  CHECK_OK(n11->closeRecv(peer_recv));
  CHECK_OK(n11->closeListen(peer_listen));
  CHECK_OK(n11->finalize(ctx));
  return 0;
}

static int p_send_handshake(void) {
  char handle[NCCL_NET_HANDLE_MAXSIZE], path[4096];
  ncclNetCommConfig_t config = {-1};
  CHECK_OK(n11->init(&ctx, 1, &config, logger, NULL));
  snprintf(path, sizeof path, "%s/handle", peer_dir);
  double start = now();
  FILE* f = NULL;
  while ((f = fopen(path, "rb")) == NULL) {
    CHECK(now() - start < 2 * DEADLINE_S, "no listen handle at %.400s", path);
    usleep(50000);
  }
  size_t got = fread(handle, 1, sizeof handle, f);
  fclose(f);
  CHECK(got == sizeof handle, "%.400s holds %zu bytes, not a handle", path, got);
  two_send = NULL;
  start = now();
  while (two_send == NULL) {
    CHECK(now() - start < DEADLINE_S, "connect to the receiving host did not finish");
    CHECK_OK(n11->connect(ctx, 0, handle, &two_send, NULL));
  }
  return 0;
}

/* The sends of the peer tests completed: the receiver may close (see p_recv_close). */
static int p_send_done(void) {
  char path[4096];
  snprintf(path, sizeof path, "%s/sent", peer_dir);
  FILE* f = fopen(path, "wb");
  CHECK(f != NULL, "cannot create %.400s", path);
  fclose(f);
  return 0;
}

static int p_send_close(void) {
  CHECK(two_send, "no connection");
  CHECK_OK(n11->closeSend(two_send));
  two_send = NULL;
  CHECK_OK(n11->finalize(ctx));
  return 0;
}

static void* lib;

static int load(const char* path) {
  /* Exactly as NCCL: dlopen(RTLD_NOW | RTLD_LOCAL), then dlsym per version. */
  lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    fprintf(stderr, "dlopen %s: %s\n", path, dlerror());
    return 2;
  }
  n11 = (ncclNet_v11_t*)dlsym(lib, "ncclNetPlugin_v11");
  n10 = (ncclNet_v10_t*)dlsym(lib, "ncclNetPlugin_v10");
  n9 = (ncclNet_v9_t*)dlsym(lib, "ncclNetPlugin_v9");
  n8 = (ncclNet_v8_t*)dlsym(lib, "ncclNetPlugin_v8");
  return 0;
}


/* ---- bench: the plugin's throughput in NCCL's pattern (both directions at once, several
 * connections, fixed-size messages, 8 in flight per connection as NCCL_STEPS), no GPU ---- */

#define BENCH_MAX_CONNS 32
#define BENCH_DEPTH 8

static int bench_side(int out_fd, int in_fd, int conns, size_t msg, size_t per_conn,
                      double* seconds) {
  void* bctx = NULL;
  ncclNetCommConfig_t config = {-1};
  CHECK_OK(n11->init(&bctx, 3, &config, logger, NULL));
  char mine[BENCH_MAX_CONNS][NCCL_NET_HANDLE_MAXSIZE], theirs[BENCH_MAX_CONNS][NCCL_NET_HANDLE_MAXSIZE];
  void *listen[BENCH_MAX_CONNS], *send[BENCH_MAX_CONNS], *recv[BENCH_MAX_CONNS];
  for (int c = 0; c < conns; c++) {
    CHECK_OK(n11->listen(bctx, 0, mine[c], &listen[c]));
    send[c] = recv[c] = NULL;
  }
  CHECK(write_all(out_fd, mine, sizeof mine[0] * (size_t)conns) == 0, "handle pipe");
  CHECK(read_deadline(in_fd, (char*)theirs, sizeof theirs[0] * (size_t)conns, 0) == 0,
        "no handles from the other process");
  int left = 2 * conns;
  double start = now();
  while (left > 0) {
    CHECK(now() - start < DEADLINE_S, "bench handshakes did not finish");
    for (int c = 0; c < conns; c++) {
      if (!send[c]) {
        CHECK_OK(n11->connect(bctx, 0, theirs[c], &send[c], NULL));
        if (send[c]) left--;
      }
      if (!recv[c]) {
        CHECK_OK(n11->accept(listen[c], &recv[c], NULL));
        if (recv[c]) left--;
      }
    }
  }
  unsigned char* sbuf = malloc(msg * BENCH_DEPTH * (size_t)conns);
  unsigned char* rbuf = malloc(msg * BENCH_DEPTH * (size_t)conns);
  CHECK(sbuf && rbuf, "out of memory");
  memset(sbuf, 0x5a, msg * BENCH_DEPTH * (size_t)conns);
  memset(rbuf, 0, msg * BENCH_DEPTH * (size_t)conns);
  void *smr[BENCH_MAX_CONNS], *rmr[BENCH_MAX_CONNS];
  void *sreq[BENCH_MAX_CONNS][BENCH_DEPTH], *rreq[BENCH_MAX_CONNS][BENCH_DEPTH];
  size_t sposted[BENCH_MAX_CONNS], sdone[BENCH_MAX_CONNS], rposted[BENCH_MAX_CONNS],
      rdone[BENCH_MAX_CONNS];
  for (int c = 0; c < conns; c++) {
    CHECK_OK(n11->closeListen(listen[c]));
    CHECK_OK(n11->regMr(send[c], sbuf + (size_t)c * msg * BENCH_DEPTH, msg * BENCH_DEPTH,
                        NCCL_PTR_HOST, &smr[c]));
    CHECK_OK(n11->regMr(recv[c], rbuf + (size_t)c * msg * BENCH_DEPTH, msg * BENCH_DEPTH,
                        NCCL_PTR_HOST, &rmr[c]));
    sposted[c] = sdone[c] = rposted[c] = rdone[c] = 0;
  }
  /* Start together. */
  CHECK(write_all(out_fd, "s", 1) == 0, "sync");
  char go;
  CHECK(read_deadline(in_fd, &go, 1, 0) == 0, "no start from the other process");
  size_t total = per_conn * (size_t)conns * 2;
  size_t finished = 0;
  start = now();
  while (finished < total) {
    CHECK(now() - start < 10 * DEADLINE_S, "bench did not finish");
    for (int c = 0; c < conns; c++) {
      /* Post in order, test in order: NCCL's proxy does the same per connection. */
      while (sposted[c] < per_conn && sposted[c] - sdone[c] < BENCH_DEPTH) {
        size_t slot = sposted[c] % BENCH_DEPTH;
        void* r = NULL;
        CHECK_OK(n11->isend(send[c], sbuf + ((size_t)c * BENCH_DEPTH + slot) * msg, msg, 0,
                            smr[c], NULL, &r));
        if (!r) break;
        sreq[c][slot] = r;
        sposted[c]++;
      }
      while (rposted[c] < per_conn && rposted[c] - rdone[c] < BENCH_DEPTH) {
        size_t slot = rposted[c] % BENCH_DEPTH;
        void* d = rbuf + ((size_t)c * BENCH_DEPTH + slot) * msg;
        size_t cap = msg;
        int tag = 0;
        void* r = NULL;
        CHECK_OK(n11->irecv(recv[c], 1, &d, &cap, &tag, &rmr[c], NULL, &r));
        if (!r) break;
        rreq[c][slot] = r;
        rposted[c]++;
      }
      int done = 0, size = 0;
      if (sdone[c] < sposted[c]) {
        CHECK_OK(n11->test(sreq[c][sdone[c] % BENCH_DEPTH], &done, &size));
        if (done) {
          CHECK(size == (int)msg, "send size %d", size);
          sdone[c]++;
          finished++;
        }
      }
      done = 0;
      if (rdone[c] < rposted[c]) {
        CHECK_OK(n11->test(rreq[c][rdone[c] % BENCH_DEPTH], &done, &size));
        if (done) {
          CHECK(size == (int)msg, "receive size %d", size);
          rdone[c]++;
          finished++;
        }
      }
    }
  }
  *seconds = now() - start;
  CHECK(rbuf[0] == 0x5a && rbuf[msg * BENCH_DEPTH * (size_t)conns - 1] == 0x5a, "no data");
  for (int c = 0; c < conns; c++) {
    CHECK_OK(n11->deregMr(send[c], smr[c]));
    CHECK_OK(n11->deregMr(recv[c], rmr[c]));
    CHECK_OK(n11->closeSend(send[c]));
    CHECK_OK(n11->closeRecv(recv[c]));
  }
  CHECK_OK(n11->finalize(bctx));
  free(sbuf);
  free(rbuf);
  return 0;
}

/* harness LIB --bench [connections] [MiB per connection and direction] [message KiB] */
static int bench(const char* path, int argc, char** argv) {
  int conns = argc > 3 ? atoi(argv[3]) : 2;
  size_t mib = argc > 4 ? (size_t)atol(argv[4]) : 2048;
  size_t msg = (argc > 5 ? (size_t)atol(argv[5]) : 512) * 1024;
  if (conns < 1 || conns > BENCH_MAX_CONNS || msg == 0 || mib == 0) {
    fprintf(stderr, "bench: 1..%d connections, sizes > 0\n", BENCH_MAX_CONNS);
    return 2;
  }
  size_t per_conn = (mib << 20) / msg;
  int a[2], b[2];
  if (pipe(a) || pipe(b)) return 2;
  pid_t pid = fork();
  if (pid < 0) return 2;
  double secs = 0;
  int bad;
  if (pid == 0) {
    close(a[0]);
    close(b[1]);
    bad = load(path) || bench_side(a[1], b[0], conns, msg, per_conn, &secs);
    if (bad) fprintf(stderr, "bench (second process) failed: %s\n", failure);
    _exit(bad ? 1 : 0);
  }
  close(a[1]);
  close(b[0]);
  bad = load(path) || bench_side(b[1], a[0], conns, msg, per_conn, &secs);
  int status = 0;
  waitpid(pid, &status, 0);
  if (bad || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    printf("bench failed: %s\n", bad ? failure : "in the second process");
    return 1;
  }
  double bytes = (double)per_conn * (double)msg * conns;
  printf("bench: %d connections each way, %zu KiB messages, %d in flight per connection, "
         "%zu MiB per connection and direction: %.2f s, %.2f GB/s per direction "
         "(= 2-rank all-reduce busbw ceiling), %.2f GB/s both directions\n",
         conns, msg >> 10, BENCH_DEPTH, (size_t)(per_conn * msg) >> 20, secs, bytes / secs / 1e9,
         2 * bytes / secs / 1e9);
  return 0;
}

int main(int argc, char** argv) {
  int two_process = argc == 3 && strcmp(argv[2], "--two-process") == 0;
  int bench_mode = argc >= 3 && strcmp(argv[2], "--bench") == 0;
  int peer_mode = argc == 5 && strcmp(argv[2], "--peer") == 0 &&
                  (strcmp(argv[4], "recv") == 0 || strcmp(argv[4], "send") == 0);
  if (argc != 2 && !two_process && !bench_mode && !peer_mode) {
    fprintf(stderr,
            "usage: %s /path/to/libnccl-net-weft.so [--two-process | --bench [connections] "
            "[MiB per connection] [message KiB] | --peer DIR recv|send]\n",
            argv[0]);
    return 2;
  }
  verbose = getenv("HARNESS_VERBOSE") != NULL;
  const char* backend = getenv("HARNESS_BACKEND") ? getenv("HARNESS_BACKEND") : "";
  mesh = strcmp(backend, "mesh") == 0 || strcmp(backend, "mesh-socket") == 0;
  ib = strcmp(backend, "mesh") == 0 || strcmp(backend, "ib") == 0;
  if (bench_mode) {
    /* The caller's environment (NCCL_SOCKET_NTHREADS, WEFT_* ...), loopback by default. */
    setenv("NCCL_SOCKET_IFNAME", "lo", 0);
    return bench(argv[1], argc, argv);
  }
  /* What a user would set for a loopback run; the thread and socket counts are checked in
   * the init message. A short connect timeout keeps the closed-listener case quick. Across
   * hosts (--peer) the interfaces are the caller's. */
  if (!peer_mode) setenv("NCCL_SOCKET_IFNAME", "lo", 1);
  setenv("NCCL_SOCKET_NTHREADS", "2", 1);
  setenv("NCCL_NSOCKS_PERTHREAD", "3", 1);
  setenv("WEFT_SOCKET_CONNECT_TIMEOUT", "6", 1);
  setenv("NCCL_DEBUG", "INFO", 1);
  unsetenv("WEFT_SOCKET_IFNAME");
  unsetenv("WEFT_SOCKET_NTHREADS");
  unsetenv("WEFT_NSOCKS_PERTHREAD");
  if (!ib && !mesh) unsetenv("WEFT_NET_BACKEND"); /* verbs and mesh runs choose theirs */
  if (peer_mode) {
    peer_dir = argv[3];
    two_sizes = peer_sizes;
    two_nsizes = sizeof peer_sizes / sizeof peer_sizes[0];
    setenv("WEFT_SOCKET_CONNECT_TIMEOUT", "60", 1);
  }

  if (two_process) {
    /* Fork before anything is loaded: no threads exist yet. */
    int hp[2], sp[2], gp[2];
    if (pipe(hp) || pipe(sp) || pipe(gp)) return 2;
    child_pid = fork();
    if (child_pid < 0) return 2;
    if (child_pid == 0) {
      close(hp[0]);
      close(sp[0]);
      close(gp[1]);
      _exit(load(argv[1]) ? 2 : child_main(hp[1], sp[1], gp[0]));
    }
    close(hp[1]);
    close(sp[1]);
    close(gp[0]);
    to_child = gp[1];
    to_child_handle = hp[0];
    from_child = sp[0];
  }
  if (load(argv[1])) return 2;

  struct test {
    const char* name;
    int (*fn)(void);
  };
  struct test two[] = {
      {"two processes: connect through a handle from a pipe", t2_handshake},
      {"two processes: 1 B, 64 KiB + 1, 64 MiB + 11", t2_sizes},
      {"two processes: grouped receive of 4, shuffled tags", t2_group},
      {"two processes: receiver killed mid-transfer", t2_peer_killed},
  };
  struct test one[] = {
      {"exported symbols", t_symbols},
      {"init and properties", t_init_and_properties},
      {"non-blocking listen/connect/accept", t_nonblocking_handshake},
      {"sizes 0 B to 64 MiB", t_sizes},
      {"grouped irecv with tags", t_grouped_receives},
      {"request limit", t_request_limit},
      {"size mismatch", t_size_mismatch},
      {"tag mismatch", t_tag_mismatch},
      {"closing in every order", t_close_orders},
      {"malformed handles", t_malformed_handles},
      {"bad arguments", t_bad_arguments},
      {"v8, v9, v10 tables", t_older_versions},
      {"finalize", t_finalize},
  };
  struct test peer_recv_tests[] = {
      {"peer: listen, handle to the shared folder, accept", p_recv_handshake},
      {"peer: receive 1 B, 4095 B, 64 KiB + 1, 1 MiB + 3, 16 MiB - 5 (every byte)", p_recv_sizes},
      {"peer: grouped receive of 4, shuffled tags (every byte)", p_recv_group},
      {"peer: close and finalize", p_recv_close},
  };
  struct test peer_send_tests[] = {
      {"peer: connect through the handle in the shared folder", p_send_handshake},
      {"peer: send 1 B, 4095 B, 64 KiB + 1, 1 MiB + 3, 16 MiB - 5", t2_sizes},
      {"peer: send a group of 4, shuffled tags", t2_group},
      {"peer: tell the receiver the sends completed", p_send_done},
      {"peer: close and finalize", p_send_close},
  };
  struct test* tests = two_process ? two : one;
  size_t ntests = two_process ? sizeof two / sizeof two[0] : sizeof one / sizeof one[0];
  if (peer_mode && strcmp(argv[4], "recv") == 0) {
    tests = peer_recv_tests;
    ntests = sizeof peer_recv_tests / sizeof peer_recv_tests[0];
  } else if (peer_mode) {
    tests = peer_send_tests;
    ntests = sizeof peer_send_tests / sizeof peer_send_tests[0];
  }
  int passed = 0, failed = 0;
  for (size_t i = 0; i < ntests; i++) {
    failure[0] = '\0';
    double t = now();
    if (i > 0 && !n11) {
      printf("SKIP %s (no v11 table)\n", tests[i].name);
      failed++;
      continue;
    }
    int bad = tests[i].fn();
    if (bad) {
      printf("FAIL %s: %s\n", tests[i].name, failure);
      failed++;
    } else {
      printf("ok   %s (%.2f s)\n", tests[i].name, now() - t);
      passed++;
    }
    fflush(stdout);
  }
  if (child_pid > 0) kill(child_pid, SIGKILL);
  printf("%d passed, %d failed\n", passed, failed);
  /* NCCL unloads its net plugin when the last communicator goes; the plugin must survive it
   * (its threads may still be ending). */
  dlclose(lib);
  return failed ? 1 : 0;
}
