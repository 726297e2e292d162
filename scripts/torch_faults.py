"""One rank of scripts/gpu-torch-faults.sh: a fault PyTorch meets through its NCCL, and
what each rank sees. Prints `rank R: CASE: ERROR <first line>` (or `rank R: CASE: ok`)
and exits 0 either way; the shell script judges the lines.

Cases (argv[1]):
  mismatch  rank 0 sends 1000 floats to rank 1, which expects 1200; then both all_reduce
  absent    rank 1 receives from rank 0, which never sends; then both all_reduce
  killed    every rank loops all_reduce; the last rank SIGKILLs itself in the middle
The process group's timeout is 30 s (WEFT_TIMEOUT and NCCL's own deadlines are shorter).
An error reaches the Python caller where PyTorch waits on the CPU (a receive); a rank held
on the GPU (its all_reduce never completes, as NCCL's contract says for a failed collective)
is ended by PyTorch's watchdog, which logs the library's text first: the shell script reads
both.
"""
import datetime
import os
import signal
import sys
import threading
import time

import torch
import torch.distributed as dist

case = sys.argv[1]
rank = int(os.environ["RANK"])
world = int(os.environ["WORLD_SIZE"])
# Ranks share the GPUs there are (with WEFT_TEST_SHARE_GPU=1, weft runs on one GPU).
local = int(os.environ["LOCAL_RANK"]) % max(torch.cuda.device_count(), 1)
torch.cuda.set_device(local)
dev = torch.device("cuda", local)
dist.init_process_group("nccl", timeout=datetime.timedelta(seconds=30), device_id=dev)


def report(what):
    text = " ".join(str(what).split())
    print(f"rank {rank}: {case}: {text[:600]}", flush=True)


def all_reduce_checked():
    """An all_reduce of ones after the fault: it either fails or sums every rank's."""
    x = torch.ones(16, device=dev)
    dist.all_reduce(x)
    torch.cuda.synchronize()
    got = x.cpu().tolist()
    if any(v != world for v in got):
        raise AssertionError(f"all_reduce gave {got[0]} where every rank's sum is {world}")


started = time.monotonic()
try:
    if case == "mismatch":
        if rank == 0:
            dist.send(torch.ones(1000, device=dev), dst=1)
        elif rank == 1:
            dist.recv(torch.zeros(1200, device=dev), src=0)
        all_reduce_checked()
    elif case == "absent":
        if rank == 1:
            dist.recv(torch.zeros(64, device=dev), src=0)
        all_reduce_checked()
    elif case == "killed":
        if rank == world - 1:
            threading.Timer(2.0, lambda: os.kill(os.getpid(), signal.SIGKILL)).start()
        x = torch.ones(1 << 20, device=dev)
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            dist.all_reduce(x)
            torch.cuda.synchronize()
            x.fill_(1.0)
        raise RuntimeError("the job went on for 90 s with a rank killed")
    else:
        raise SystemExit(f"unknown case {case}")
    report("ok")
except Exception as e:  # noqa: BLE001 - every failure is the result being reported
    report(f"ERROR after {time.monotonic() - started:.1f} s: {type(e).__name__}: {e}")
os._exit(0)
