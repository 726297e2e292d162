#!/usr/bin/env python3
"""Gloo all-reduce on host memory through torch.distributed, in nccl-tests' columns.

    python3 bench/gloo_allreduce.py --ranks 4 -b 8 -e 64M -f 2 -n 20 -w 5

Starts N processes on this host (rendezvous through a file, Gloo's pairs over loopback) and
never touches a GPU: CUDA_VISIBLE_DEVICES is emptied before torch is imported. For every size
the result is checked once, every element, against a reference each rank computes alone (it
regenerates every rank's seeded data; values are k/8 with |k| <= 8000, so every sum is exact in
any order), then `warmup` untimed and `iters` timed calls. The time printed is the mean over
ranks of each rank's wall time per call; busbw = algbw * 2(n-1)/n, in GB/s (1e9 bytes).

torch.distributed.all_reduce only works in place, so the "out-of-place" columns time what a
torch user does for out-of-place (copy the input to the output, then all-reduce the output) and
the "in-place" columns time all_reduce alone: the in-place columns are Gloo's own figure.
Exits 1 if any element was wrong, 3 if a rank failed or the run passed --timeout.
"""
import argparse
import os
import sys
import tempfile
import time
import traceback

# Before torch is imported, in this process and (inherited) in every rank: no GPU, and Gloo on
# loopback, so the run needs no network and cannot disturb the GPUs of the machine it runs on.
os.environ["CUDA_VISIBLE_DEVICES"] = ""
os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")

import multiprocessing as mp  # noqa: E402
from datetime import timedelta  # noqa: E402

MASK64 = (1 << 64) - 1


def parse_size(text):
    """'64M' -> 67108864 (K, M, G are powers of 1024, as in nccl-tests)."""
    scale = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30}.get(text[-1:].lower(), 1)
    digits = text[:-1] if scale != 1 else text
    if not digits.isdigit() or int(digits) == 0:
        raise argparse.ArgumentTypeError(f"bad size {text!r}: want bytes with an optional K, M or G")
    return int(digits) * scale


def sizes(min_bytes, max_bytes, factor):
    size = min_bytes
    while size <= max_bytes:
        yield size
        size *= factor


def stream_seed(rank, count):
    return (0x9E3779B97F4A7C15 ^ (rank * 0xBF58476D1CE4E5B9) ^ (count * 0x94D049BB133111EB)) & MASK64


def rank_data(torch, rank, count):
    generator = torch.Generator().manual_seed(stream_seed(rank, count) & ((1 << 63) - 1))
    k = torch.randint(-8000, 8001, (count,), generator=generator, dtype=torch.int32)
    return k.to(torch.float32) / 8


def format_columns(time_us, nbytes, nranks, wrong):
    """time, algbw, busbw, #wrong with nccl-tests' widths and precisions."""
    if time_us >= 10000.0:
        time_text = f"{time_us:7.0f}"
    elif time_us >= 100.0:
        time_text = f"{time_us:7.1f}"
    else:
        time_text = f"{time_us:7.2f}"
    algbw = nbytes / 1e9 / (time_us / 1e6)
    busbw = algbw * 2.0 * (nranks - 1) / nranks
    return f"  {time_text}  {algbw:6.2f}  {busbw:6.2f}  {wrong:6d}", busbw


def header(opts, torch):
    cols = ("size", "count", "type", "redop", "root", "time", "algbw", "busbw", "#wrong",
            "time", "algbw", "busbw", "#wrong")
    units = ("(B)", "(elements)", "", "", "", "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)",
             "(GB/s)", "")
    widths = (11, 12, 8, 6, 6, 7, 6, 6, 6, 7, 6, 6, 6)

    def line(values):
        return "#" + "  ".join(f"{v:>{w}}" for v, w in zip(values, widths))

    return "\n".join([
        f"# gloo_allreduce: nranks {opts.ranks} minBytes {opts.min_bytes} maxBytes {opts.max_bytes} "
        f"step: {opts.factor}(factor) warmup iters: {opts.warmup} iters: {opts.iters} validation: 1",
        f"# torch {torch.__version__}, backend gloo, host memory (GLOO_SOCKET_IFNAME="
        f"{os.environ['GLOO_SOCKET_IFNAME']}), {opts.threads} torch thread(s) per rank; "
        "out-of-place = copy + all_reduce",
        "#",
        "#" + f"{'out-of-place':>74}{'in-place':>31}",
        line(cols),
        line(units),
    ])


def time_calls(dist, torch, call, opts):
    """Mean over ranks of the wall time per call, in microseconds."""
    for _ in range(opts.warmup):
        call()
    dist.barrier()
    start = time.perf_counter()
    for _ in range(opts.iters):
        call()
    mine = torch.tensor([(time.perf_counter() - start) / opts.iters * 1e6], dtype=torch.float64)
    dist.all_reduce(mine)
    return float(mine[0]) / opts.ranks


def rank_main(rank, opts, rendezvous, total_wrong):
    import torch
    import torch.distributed as dist

    # Gloo reduces on its own threads; torch's intra-op pool only serves the copy and the check,
    # and N ranks x (cores) spinning OpenMP threads would slow those and disturb Gloo's.
    torch.set_num_threads(opts.threads)
    dist.init_process_group("gloo", init_method=f"file://{rendezvous}", rank=rank,
                            world_size=opts.ranks, timeout=timedelta(seconds=opts.timeout))
    n = opts.ranks
    if rank == 0:
        print(header(opts, torch), flush=True)
    wrong_sum, busbw_sum, columns = 0, 0.0, 0
    for nbytes in sizes(opts.min_bytes, opts.max_bytes, opts.factor):
        count = nbytes // 4
        if count == 0:
            continue
        nbytes = count * 4
        own = rank_data(torch, rank, count)
        want = rank_data(torch, 0, count)
        for r in range(1, n):
            want += rank_data(torch, r, count)

        send = own.clone()
        recv = torch.full((count,), float("nan"))  # an element never written shows

        def out_of_place():
            recv.copy_(send)
            dist.all_reduce(recv)

        out_of_place()
        wrong_oop = int((recv != want).sum()) + int((send != own).sum())
        recv.copy_(own)
        dist.all_reduce(recv)
        wrong_ip = int((recv != want).sum())
        wrong = torch.tensor([wrong_oop, wrong_ip], dtype=torch.int64)
        dist.all_reduce(wrong)

        oop_us = time_calls(dist, torch, out_of_place, opts)
        ip_us = time_calls(dist, torch, lambda: dist.all_reduce(recv), opts)
        if rank == 0:
            oop_text, oop_busbw = format_columns(oop_us, nbytes, n, int(wrong[0]))
            ip_text, ip_busbw = format_columns(ip_us, nbytes, n, int(wrong[1]))
            print(f"{nbytes:12d}  {count:12d}  {'float':>8}  {'sum':>6}  {-1:6d}{oop_text}{ip_text}", flush=True)
            busbw_sum += oop_busbw + ip_busbw
            columns += 2
        wrong_sum += int(wrong.sum())
    if rank == 0:
        print(f"# Out of bounds values : {wrong_sum} {'FAILED' if wrong_sum else 'OK'}")
        print(f"# Avg bus bandwidth    : {busbw_sum / columns if columns else 0.0:g} \n#", flush=True)
        total_wrong.value = wrong_sum
    dist.destroy_process_group()


def rank_entry(rank, opts, rendezvous, total_wrong):
    try:
        rank_main(rank, opts, rendezvous, total_wrong)
    except BaseException:  # one line per failed rank names it; the parent stops the others
        sys.stderr.write(f"gloo_allreduce: rank {rank} failed:\n{traceback.format_exc()}")
        sys.stderr.flush()
        os._exit(3)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ranks", "-np", type=int, default=4)
    parser.add_argument("-b", dest="min_bytes", type=parse_size, default=8)
    parser.add_argument("-e", dest="max_bytes", type=parse_size, default=64 << 20)
    parser.add_argument("-f", dest="factor", type=int, default=2)
    parser.add_argument("-n", "--iters", dest="iters", type=int, default=20)
    parser.add_argument("-w", "--warmup", dest="warmup", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1,
                        help="torch intra-op threads per rank, for the copy and the check (default 1)")
    parser.add_argument("--timeout", type=int, default=600,
                        help="seconds before the whole run is stopped (default 600)")
    opts = parser.parse_args()
    if opts.ranks < 1 or opts.threads < 1 or opts.factor < 2 or opts.iters < 1 or opts.warmup < 0 or \
            opts.min_bytes < 4 or opts.max_bytes < opts.min_bytes:
        parser.error("need ranks >= 1, threads >= 1, factor >= 2, iters >= 1, warmup >= 0, 4 <= MIN <= MAX")

    ctx = mp.get_context("spawn")
    total_wrong = ctx.Value("q", 0)
    with tempfile.TemporaryDirectory(prefix="gloo-allreduce-") as tmp:
        rendezvous = os.path.join(tmp, "rendezvous")
        procs = [ctx.Process(target=rank_entry, args=(r, opts, rendezvous, total_wrong))
                 for r in range(opts.ranks)]
        for p in procs:
            p.start()
        deadline = time.monotonic() + opts.timeout
        failed = None
        while failed is None and any(p.exitcode is None for p in procs):
            if time.monotonic() > deadline:
                failed = f"the run passed --timeout {opts.timeout} s"
            for rank, p in enumerate(procs):
                p.join(timeout=0.05)
                if p.exitcode not in (None, 0) and failed is None:
                    failed = f"rank {rank} exited with status {p.exitcode}"
        if failed is not None:
            for p in procs:
                if p.exitcode is None:
                    p.terminate()
            for p in procs:
                p.join(timeout=10)
                if p.exitcode is None:
                    p.kill()
            sys.stderr.write(f"gloo_allreduce: {failed}; stopped the other ranks\n")
            return 3
    if total_wrong.value:
        sys.stderr.write(f"gloo_allreduce: {total_wrong.value} wrong elements\n")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
