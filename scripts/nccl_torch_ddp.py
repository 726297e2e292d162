"""One PyTorch DDP training step on weft's libnccl.so.2, checked against a CPU computation.

Run by scripts/nccl-torch-ddp.sh under torchrun (one process per GPU, or two sharing GPU 0
with WEFT_TEST_SHARE_GPU=1): builds the same small model on every rank, runs one
forward/backward/step on rank-dependent data through DistributedDataParallel (parameter
broadcast at construction, gradient all-reduce in buckets), then compares every parameter
with the step computed on the CPU from all ranks' data. Also an all_reduce, all_gather,
reduce_scatter, broadcast and a send/recv pair through ProcessGroupNCCL, each checked.
Five all_reduces coalesced into one NCCL group (ProcessGroupNCCL's coalescing manager: one
ncclGroupStart/ncclGroupEnd, which NCCL and weft fuse into fewer launches).
A new_group (a split communicator) runs an all_reduce and a reduce. Prints one line per
check; exits 1 on the first mismatch. With WEFT_DDP_GRADS_DIR set, each rank saves its
averaged gradients there (grads-rank<N>.pt) before the optimizer step.
"""

import os
import sys

import torch
import torch.distributed as dist
import torch.nn as nn


def model():
    torch.manual_seed(1234)
    return nn.Sequential(nn.Linear(37, 61), nn.ReLU(), nn.Linear(61, 5))


def data(rank):
    g = torch.Generator().manual_seed(100 + rank)
    return torch.randn(23, 37, generator=g), torch.randn(23, 5, generator=g)


def check(name, got, want, rank, tol=1e-5):
    err = (got.detach().float().cpu() - want.detach().float().cpu()).abs().max().item()
    ok = err <= tol
    print(f"rank {rank}: {'ok ' if ok else 'BAD'} {name} (max error {err:.2e})", flush=True)
    if not ok:
        sys.exit(1)


def main():
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    share = os.environ.get("WEFT_TEST_SHARE_GPU") == "1"
    dev = torch.device("cuda", 0 if share else int(os.environ["LOCAL_RANK"]))
    torch.cuda.set_device(dev)
    dist.init_process_group("nccl", device_id=dev)

    # Collectives first, each checked.
    x = torch.arange(1001, dtype=torch.float32, device=dev) * (rank + 1)
    y = x.clone()
    dist.all_reduce(y)
    check("all_reduce sum", y, torch.arange(1001.0) * sum(r + 1 for r in range(world)), rank)
    parts = [torch.empty_like(x) for _ in range(world)]
    dist.all_gather(parts, x)
    for r in range(world):
        check(f"all_gather part {r}", parts[r], torch.arange(1001.0) * (r + 1), rank)
    big = torch.cat([x] * world)
    out = torch.empty_like(x)
    dist.reduce_scatter_tensor(out, big)
    check("reduce_scatter", out, torch.arange(1001.0) * sum(r + 1 for r in range(world)), rank)
    b = x.clone()
    dist.broadcast(b, src=world - 1)
    check("broadcast", b, torch.arange(1001.0) * world, rank)
    # A group of collectives (ProcessGroupNCCL's coalescing: one ncclGroupStart/End, which
    # weft, as NCCL, fuses into fewer launches): three all-reduces of one size, then two of
    # others.
    ts = [x.clone() * (i + 1) for i in range(3)] + [x[:100].clone(), x.clone().repeat(4)]
    with dist._coalescing_manager(device=dev):
        for t in ts:
            dist.all_reduce(t)
    total = sum(r + 1 for r in range(world))
    for i in range(3):
        check(f"coalesced all_reduce {i}", ts[i], torch.arange(1001.0) * total * (i + 1), rank)
    check("coalesced all_reduce 3", ts[3], torch.arange(100.0) * total, rank)
    check("coalesced all_reduce 4", ts[4], torch.arange(1001.0).repeat(4) * total, rank)
    # A second communicator: new_group over every rank (ProcessGroupNCCL splits the default
    # communicator with ncclCommSplit, its device being bound at init), and a reduce on it.
    group = dist.new_group(ranks=list(range(world)))
    g = x.clone()
    dist.all_reduce(g, op=dist.ReduceOp.MAX, group=group)
    check("all_reduce max on a new_group", g, torch.arange(1001.0) * world, rank)
    r = x.clone()
    dist.reduce(r, dst=0, group=group)
    if rank == 0:
        check("reduce to rank 0 on a new_group", r, torch.arange(1001.0) * sum(q + 1 for q in range(world)), rank)
    if world >= 2 and rank < 2:
        peer = 1 - rank
        recv = torch.empty_like(x)
        ops = [dist.P2POp(dist.isend, x, peer), dist.P2POp(dist.irecv, recv, peer)]
        for w in dist.batch_isend_irecv(ops):
            w.wait()
        check("send/recv", recv, torch.arange(1001.0) * (peer + 1), rank)

    # One DDP step.
    net = model().to(dev)
    ddp = nn.parallel.DistributedDataParallel(net, device_ids=[dev])
    opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
    inp, tgt = data(rank)
    loss = nn.functional.mse_loss(ddp(inp.to(dev)), tgt.to(dev))
    opt.zero_grad()
    loss.backward()
    # The averaged gradients as this library left them, for nccl-torch-ddp.sh to compare
    # with the same step on another library (weft's against NVIDIA's NCCL).
    grads_dir = os.environ.get("WEFT_DDP_GRADS_DIR")
    if grads_dir:
        grads = {name: p.grad.detach().cpu() for name, p in net.named_parameters()}
        torch.save(grads, os.path.join(grads_dir, f"grads-rank{rank}.pt"))
    opt.step()
    torch.cuda.synchronize()

    # The same step on the CPU: DDP averages the ranks' gradients.
    ref = model()
    ref_opt = torch.optim.SGD(ref.parameters(), lr=0.1)
    ref_opt.zero_grad()
    for r in range(world):
        i, t = data(r)
        (nn.functional.mse_loss(ref(i), t) / world).backward()
    ref_opt.step()
    for (name, p), q in zip(net.named_parameters(), ref.parameters()):
        check(f"DDP step: {name}", p, q, rank, tol=1e-5)

    dist.barrier()
    dist.destroy_process_group()
    print(f"rank {rank}: DDP step and collectives match the CPU", flush=True)


if __name__ == "__main__":
    main()
