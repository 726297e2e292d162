"""One rank of scripts/gpu-cold-start.sh: the time from before init_process_group to the end
of the first all_reduce (the communicator made eagerly, as with device_id), then the first
all_reduce of each further element type, each result checked element by element. Rank 0
prints one JSON line: {"init_first": s, "types": {name: s}}."""
import json
import os
import time

import torch
import torch.distributed as dist

rank = int(os.environ["RANK"])
world = int(os.environ["WORLD_SIZE"])
local = int(os.environ["LOCAL_RANK"])
torch.cuda.set_device(local)
dev = torch.device("cuda", local)
n = 1 << 16


def all_reduce_checked(dtype):
    x = torch.full((n,), rank + 1, dtype=dtype, device=dev)
    dist.all_reduce(x)
    torch.cuda.synchronize()
    want = world * (world + 1) // 2
    bad = (x != want).sum().item()
    if bad:
        raise SystemExit(f"rank {rank}: {dtype} all_reduce: {bad} of {n} elements wrong")


torch.cuda.synchronize()
start = time.perf_counter()
dist.init_process_group("nccl", device_id=dev)
all_reduce_checked(torch.float32)
init_first = time.perf_counter() - start
types = {}
for dtype in (torch.bfloat16, torch.float16, torch.int64, torch.float64, torch.int32):
    t = time.perf_counter()
    all_reduce_checked(dtype)
    types[str(dtype).replace("torch.", "")] = time.perf_counter() - t
dist.destroy_process_group()
if rank == 0:
    print(json.dumps({"init_first": init_first, "types": types}), flush=True)
