"""How fast one GPU block reads and writes pinned host memory, by how the memory was pinned.

NCCL's NET transport (any net plugin, host memory) stages data in buffers from
cudaHostAlloc; its SHM transport in memory it maps through cuMem. On the 4x H200 host a
2-rank all-reduce through NET spends ~175 us per MiB of received data in the GPU, against far
less through SHM (docs/benchmarks.md). This measures the GPU side alone: one block of 512
threads (as NCCL's kernel per channel) and more blocks, reading (one or eight 16-byte loads
in flight per thread) or writing 64 MiB of host
memory pinned three ways: cudaHostAlloc (PyTorch's pinned memory), plain 4 KiB pages
registered with cudaHostRegister, and transparent huge pages registered the same way.

    python3 bench/gpu_host_read.py [MiB]
"""

import ctypes
import mmap
import sys
import time

import cupy as cp
import torch

KERNELS = r"""
extern "C" __global__ void read_host(const uint4* __restrict__ p, size_t n, unsigned long long* out) {
  uint4 acc = make_uint4(0, 0, 0, 0);
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
    uint4 v = p[i];
    acc.x ^= v.x; acc.y ^= v.y; acc.z ^= v.z; acc.w ^= v.w;
  }
  if ((acc.x ^ acc.y ^ acc.z ^ acc.w) == 0x9e3779b9u) atomicAdd(out, 1ull);
}
// NCCL's copy loops keep several loads in flight per thread; so does this one (8 x 16 B).
extern "C" __global__ void read_host_unrolled(const uint4* __restrict__ p, size_t n, unsigned long long* out) {
  uint4 acc = make_uint4(0, 0, 0, 0);
  size_t stride = (size_t)gridDim.x * blockDim.x;
  size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
  for (; i + 7 * stride < n; i += 8 * stride) {
    uint4 v[8];
#pragma unroll
    for (int u = 0; u < 8; u++) v[u] = p[i + u * stride];
#pragma unroll
    for (int u = 0; u < 8; u++) { acc.x ^= v[u].x; acc.y ^= v[u].y; acc.z ^= v[u].z; acc.w ^= v[u].w; }
  }
  for (; i < n; i += stride) { uint4 v = p[i]; acc.x ^= v.x; acc.y ^= v.y; acc.z ^= v.z; acc.w ^= v.w; }
  if ((acc.x ^ acc.y ^ acc.z ^ acc.w) == 0x9e3779b9u) atomicAdd(out, 1ull);
}
extern "C" __global__ void write_host(uint4* __restrict__ p, size_t n) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
    p[i] = make_uint4((unsigned)i, 1, 2, 3);
}
"""


def pinned_buffers(nbytes):
    """(name, device-usable address, keep-alive) for each way of pinning."""
    out = []
    t = torch.empty(nbytes, dtype=torch.uint8, pin_memory=True)
    t.fill_(1)
    out.append(("cudaHostAlloc (torch pinned)", t.data_ptr(), t))
    cudart = torch.cuda.cudart()
    for name, huge in (("4 KiB pages + cudaHostRegister", False), ("huge pages (THP) + cudaHostRegister", True)):
        m = mmap.mmap(-1, nbytes + (2 << 20), flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
        if huge:
            m.madvise(mmap.MADV_HUGEPAGE)
        else:
            m.madvise(mmap.MADV_NOHUGEPAGE)
        base = ctypes.addressof(ctypes.c_char.from_buffer(m))
        addr = (base + (2 << 20) - 1) & ~((2 << 20) - 1)  # 2 MiB aligned
        ctypes.memset(addr, 1, nbytes)
        err = cudart.cudaHostRegister(addr, nbytes, 0)
        if int(err) != 0:
            print(f"{name}: cudaHostRegister failed ({err})")
            continue
        out.append((name, addr, (m, cudart, addr)))
    return out


def rate(kernel, args, blocks, nbytes, reps=5):
    kernel((blocks,), (512,), args)  # warm-up (and page-table fill)
    cp.cuda.Device().synchronize()
    best = 0.0
    for _ in range(reps):
        start = time.perf_counter()
        kernel((blocks,), (512,), args)
        cp.cuda.Device().synchronize()
        best = max(best, nbytes / (time.perf_counter() - start) / 1e9)
    return best


def main():
    mib = int(sys.argv[1]) if len(sys.argv) > 1 else 64
    nbytes = mib << 20
    mod = cp.RawModule(code=KERNELS)
    read, write = mod.get_function("read_host"), mod.get_function("write_host")
    read8 = mod.get_function("read_host_unrolled")
    out = cp.zeros(1, dtype=cp.uint64)
    thp = open("/sys/kernel/mm/transparent_hugepage/enabled").read().strip()
    print(f"{torch.cuda.get_device_name()}, {mib} MiB, 512 threads per block; THP: {thp}")
    print(f"{'memory':>38} {'blocks':>6} {'read GB/s':>10} {'read x8 GB/s':>13} {'write GB/s':>11}")
    for name, addr, _keep in pinned_buffers(nbytes):
        n16 = cp.uint64(nbytes // 16)
        for blocks in (1, 2, 8, 32):
            r = rate(read, (cp.uint64(addr), n16, out), blocks, nbytes)
            r8 = rate(read8, (cp.uint64(addr), n16, out), blocks, nbytes)
            w = rate(write, (cp.uint64(addr), n16), blocks, nbytes)
            print(f"{name:>38} {blocks:6d} {r:10.2f} {r8:13.2f} {w:11.2f}")


if __name__ == "__main__":
    main()
