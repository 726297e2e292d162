/* NCCL's net plugin ABI (ncclNet_v8_t .. ncclNet_v11_t, NCCL 2.28), written for weft's test
 * harness from the documented field order; the sizes below are those of NCCL's headers on
 * x86-64 and are asserted, as the plugin asserts them on its side. */
#ifndef WEFT_NCCL_NET_ABI_H
#define WEFT_NCCL_NET_ABI_H

#include <stddef.h>
#include <stdint.h>

typedef int ncclResult_t;
enum {
  ncclSuccess = 0,
  ncclUnhandledCudaError = 1,
  ncclSystemError = 2,
  ncclInternalError = 3,
  ncclInvalidArgument = 4,
  ncclInvalidUsage = 5,
  ncclRemoteError = 6,
};

#define NCCL_NET_HANDLE_MAXSIZE 128
#define NCCL_PTR_HOST 0x1
#define NCCL_PTR_CUDA 0x2
#define NCCL_PTR_DMABUF 0x4
#define NCCL_NET_MAX_REQUESTS 32
#define NCCL_NET_MAX_DEVS_PER_NIC 4
#define NCCL_NET_OPTIONAL_RECV_COMPLETION 0x1

typedef void (*ncclDebugLogger_t)(int level, unsigned long flags, const char* file, int line,
                                  const char* fmt, ...);
typedef ncclResult_t (*ncclProfilerCallback_t)(void** eHandle, int type, void* pHandle,
                                               int64_t pluginId, void* extData);

typedef struct {
  int netDeviceType;
  int netDeviceVersion;
  void* handle;
  size_t size;
  int needsProxyProgress;
} ncclNetDeviceHandle_t;

typedef struct {
  int ndevs;
  int devs[NCCL_NET_MAX_DEVS_PER_NIC];
} ncclNetVDeviceProps_t;

typedef struct {
  int trafficClass;
} ncclNetCommConfig_t;

typedef struct {
  int32_t maxConcurrentPeers, minConcurrentPeers, maxFlowsPerPeer, minFlowsPerPeer;
} ncclNetCommAttr_t;

typedef struct {
  ncclNetCommAttr_t sendCommAttr, recvCommAttr;
  uint32_t op, algo, proto;
} ncclNetAttr_t;

typedef struct {
  char* name;
  char* pciPath;
  uint64_t guid;
  int ptrSupport, regIsGlobal, speed, port;
  float latency;
  int maxComms, maxRecvs;
  int netDeviceType, netDeviceVersion;
} ncclNetProperties_v8_t;

typedef struct {
  char* name;
  char* pciPath;
  uint64_t guid;
  int ptrSupport, regIsGlobal, forceFlush, speed, port;
  float latency;
  int maxComms, maxRecvs;
  int netDeviceType, netDeviceVersion;
  ncclNetVDeviceProps_t vProps;
  size_t maxP2pBytes, maxCollBytes;
} ncclNetProperties_v9_t; /* also v10 */

typedef struct {
  char* name;
  char* pciPath;
  uint64_t guid;
  int ptrSupport, regIsGlobal, forceFlush, speed, port;
  float latency;
  int maxComms, maxRecvs;
  int netDeviceType, netDeviceVersion;
  ncclNetVDeviceProps_t vProps;
  size_t maxP2pBytes, maxCollBytes;
  int maxMultiRequestSize;
} ncclNetProperties_v11_t;

/* The members every version has at the same place and with the same type. */
#define NET_COMMON_TAIL                                                                      \
  ncclResult_t (*accept)(void* listenComm, void** recvComm, ncclNetDeviceHandle_t** devComm); \
  ncclResult_t (*regMr)(void* comm, void* data, size_t size, int type, void** mhandle);        \
  ncclResult_t (*regMrDmaBuf)(void* comm, void* data, size_t size, int type, uint64_t offset,  \
                              int fd, void** mhandle);                                         \
  ncclResult_t (*deregMr)(void* comm, void* mhandle);

#define NET_COMMON_END                                                                        \
  ncclResult_t (*iflush)(void* recvComm, int n, void** data, int* sizes, void** mhandles,     \
                         void** request);                                                     \
  ncclResult_t (*test)(void* request, int* done, int* sizes);                                 \
  ncclResult_t (*closeSend)(void* sendComm);                                                  \
  ncclResult_t (*closeRecv)(void* recvComm);                                                  \
  ncclResult_t (*closeListen)(void* listenComm);                                              \
  ncclResult_t (*getDeviceMr)(void* comm, void* mhandle, void** dptr_mhandle);                \
  ncclResult_t (*irecvConsumed)(void* recvComm, int n, void* request);

typedef struct {
  const char* name;
  ncclResult_t (*init)(ncclDebugLogger_t logFunction);
  ncclResult_t (*devices)(int* ndev);
  ncclResult_t (*getProperties)(int dev, ncclNetProperties_v8_t* props);
  ncclResult_t (*listen)(int dev, void* handle, void** listenComm);
  ncclResult_t (*connect)(int dev, void* handle, void** sendComm, ncclNetDeviceHandle_t** devComm);
  NET_COMMON_TAIL
  ncclResult_t (*isend)(void* sendComm, void* data, int size, int tag, void* mhandle, void** request);
  ncclResult_t (*irecv)(void* recvComm, int n, void** data, int* sizes, int* tags, void** mhandles,
                        void** request);
  NET_COMMON_END
} ncclNet_v8_t;

typedef struct {
  const char* name;
  ncclResult_t (*init)(ncclDebugLogger_t logFunction);
  ncclResult_t (*devices)(int* ndev);
  ncclResult_t (*getProperties)(int dev, ncclNetProperties_v9_t* props);
  ncclResult_t (*listen)(int dev, void* handle, void** listenComm);
  ncclResult_t (*connect)(int dev, void* handle, void** sendComm, ncclNetDeviceHandle_t** devComm);
  NET_COMMON_TAIL
  ncclResult_t (*isend)(void* sendComm, void* data, size_t size, int tag, void* mhandle,
                        void** request);
  ncclResult_t (*irecv)(void* recvComm, int n, void** data, size_t* sizes, int* tags,
                        void** mhandles, void** request);
  NET_COMMON_END
  ncclResult_t (*makeVDevice)(int* d, ncclNetVDeviceProps_t* props);
} ncclNet_v9_t;

typedef struct {
  const char* name;
  ncclResult_t (*init)(ncclDebugLogger_t logFunction, ncclProfilerCallback_t profFunction);
  ncclResult_t (*devices)(int* ndev);
  ncclResult_t (*getProperties)(int dev, ncclNetProperties_v9_t* props);
  ncclResult_t (*listen)(int dev, void* handle, void** listenComm);
  ncclResult_t (*connect)(int dev, ncclNetCommConfig_t* config, void* handle, void** sendComm,
                          ncclNetDeviceHandle_t** devComm);
  NET_COMMON_TAIL
  ncclResult_t (*isend)(void* sendComm, void* data, size_t size, int tag, void* mhandle,
                        void* phandle, void** request);
  ncclResult_t (*irecv)(void* recvComm, int n, void** data, size_t* sizes, int* tags,
                        void** mhandles, void** phandles, void** request);
  NET_COMMON_END
  ncclResult_t (*makeVDevice)(int* d, ncclNetVDeviceProps_t* props);
} ncclNet_v10_t;

typedef struct {
  const char* name;
  ncclResult_t (*init)(void** ctx, uint64_t commId, ncclNetCommConfig_t* config,
                       ncclDebugLogger_t logFunction, ncclProfilerCallback_t profFunction);
  ncclResult_t (*devices)(int* ndev);
  ncclResult_t (*getProperties)(int dev, ncclNetProperties_v11_t* props);
  ncclResult_t (*listen)(void* ctx, int dev, void* handle, void** listenComm);
  ncclResult_t (*connect)(void* ctx, int dev, void* handle, void** sendComm,
                          ncclNetDeviceHandle_t** devComm);
  NET_COMMON_TAIL
  ncclResult_t (*isend)(void* sendComm, void* data, size_t size, int tag, void* mhandle,
                        void* phandle, void** request);
  ncclResult_t (*irecv)(void* recvComm, int n, void** data, size_t* sizes, int* tags,
                        void** mhandles, void** phandles, void** request);
  NET_COMMON_END
  ncclResult_t (*makeVDevice)(int* d, ncclNetVDeviceProps_t* props);
  ncclResult_t (*finalize)(void* ctx);
  ncclResult_t (*setNetAttr)(void* ctx, ncclNetAttr_t* netAttr);
} ncclNet_v11_t;

#if defined(__x86_64__)
_Static_assert(sizeof(ncclNetDeviceHandle_t) == 32, "ncclNetDeviceHandle_t");
_Static_assert(sizeof(ncclNetAttr_t) == 44, "ncclNetAttr_t");
_Static_assert(sizeof(ncclNetProperties_v8_t) == 64, "ncclNetProperties_v8_t");
_Static_assert(offsetof(ncclNetProperties_v8_t, latency) == 40, "v8 latency");
_Static_assert(sizeof(ncclNetProperties_v9_t) == 104, "ncclNetProperties_v9_t");
_Static_assert(offsetof(ncclNetProperties_v9_t, maxP2pBytes) == 88, "v9 maxP2pBytes");
_Static_assert(sizeof(ncclNetProperties_v11_t) == 112, "ncclNetProperties_v11_t");
_Static_assert(offsetof(ncclNetProperties_v11_t, maxMultiRequestSize) == 104, "v11 maxMulti");
_Static_assert(sizeof(ncclNet_v8_t) == 19 * 8, "ncclNet_v8_t");
_Static_assert(offsetof(ncclNet_v8_t, isend) == 10 * 8, "v8 isend");
_Static_assert(sizeof(ncclNet_v9_t) == 20 * 8, "ncclNet_v9_t");
_Static_assert(sizeof(ncclNet_v10_t) == 20 * 8, "ncclNet_v10_t");
_Static_assert(sizeof(ncclNet_v11_t) == 22 * 8, "ncclNet_v11_t");
_Static_assert(offsetof(ncclNet_v11_t, test) == 13 * 8, "v11 test");
_Static_assert(offsetof(ncclNet_v11_t, setNetAttr) == 21 * 8, "v11 setNetAttr");
#endif

#endif
