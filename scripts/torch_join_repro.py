"""DDP with uneven inputs (`model.join()`), the pattern of PyTorch's test_ddp_uneven_inputs,
cut down to find where weft's libnccl and NVIDIA's part (issue 27; docs/nccl-api.md).

On two H100 (2026-11-27) the suite's test_ddp_uneven_inputs failed on weft only: on the rank
still training, DDP's `_find_common_rank` (an all-reduce MAX of one int64) returned
1065353216, the bits of float 1.0, and the buffer broadcast then refused that root. This
script reproduced it (part 1 on the one-shot, part 2 on the ring) and found the cause:
PyTorch runs the synchronous calls on the current stream and the asynchronous one on its
NCCL stream, and weft did not order launches across streams (fixed: docs/nccl-api.md,
"Streams"); it passes on both libraries since. It runs, under torchrun with one process per GPU:

1. the collectives of the join pattern alone, in the order each rank issues them: the
   training rank an async float SUM of ones then an int64 MAX of its rank, the joined rank
   a float SUM of zeros then an int64 MAX of -1, several rounds; every result checked;
2. DDP with a BatchNorm (buffers to sync) on rank-dependent numbers of inputs under
   `model.join()`, then every parameter and buffer compared across ranks.

Prints one line per check and exits 1 at the first wrong one. Run it on each library:
  torchrun --standalone --nproc_per_node=2 scripts/torch_join_repro.py
  LD_PRELOAD=$PWD/.gpu/nccl/lib/libnccl.so.2 torchrun ... (weft), also with WEFT_ALGO=ring
  and WEFT_ALGO=oneshot to find the algorithm that reads another call's bytes.
"""

import os
import sys

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP


def bad(rank, what):
    print(f"rank {rank}: BAD {what}", flush=True)
    sys.exit(1)


def join_collectives(rank, world, dev, rounds=20):
    """The join pattern's calls: rank 0 plays the joined rank, the others train."""
    for r in range(rounds):
        training = rank != 0
        flag = torch.ones(1, device=dev) if training else torch.zeros(1, device=dev)
        work = dist.all_reduce(flag, async_op=training)
        common = torch.tensor([rank if training else -1], device=dev, dtype=torch.int64)
        dist.all_reduce(common, op=dist.ReduceOp.MAX)
        if work is not None and training:
            work.wait()
        if flag.item() != world - 1:
            bad(rank, f"round {r}: float SUM of the training ranks' ones gave {flag.item()}")
        if common.item() != world - 1:
            bad(rank, f"round {r}: int64 MAX gave {common.item()} (want {world - 1})")
    print(f"rank {rank}: ok join collectives ({rounds} rounds)", flush=True)


def uneven_ddp(rank, world, dev):
    torch.manual_seed(7)
    net = nn.Sequential(nn.Linear(10, 16), nn.BatchNorm1d(16), nn.ReLU(), nn.Linear(16, 4)).to(dev)
    model = DDP(net, device_ids=[dev.index])
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    steps = 5 + 2 * rank
    g = torch.Generator().manual_seed(rank)
    with model.join():
        for _ in range(steps):
            x = torch.randn(8, 10, generator=g).to(dev)
            loss = model(x).sum()
            loss.backward()
            opt.step()
            opt.zero_grad()
    state = [t.detach().float().reshape(-1) for t in list(net.parameters()) + list(net.buffers())]
    flat = torch.cat(state)
    gathered = [torch.empty_like(flat) for _ in range(world)]
    dist.all_gather(gathered, flat)
    for q, other in enumerate(gathered):
        err = (other - flat).abs().max().item()
        if err > 1e-5:
            bad(rank, f"DDP join: parameters and buffers differ from rank {q}'s by {err:.2e}")
    print(f"rank {rank}: ok DDP join with {steps} inputs, parameters and buffers equal", flush=True)


def main():
    rank = int(os.environ["RANK"])
    world = int(os.environ["WORLD_SIZE"])
    dev = torch.device("cuda", int(os.environ.get("LOCAL_RANK", rank)))
    torch.cuda.set_device(dev)
    dist.init_process_group("nccl", device_id=dev)
    join_collectives(rank, world, dev)
    uneven_ddp(rank, world, dev)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
