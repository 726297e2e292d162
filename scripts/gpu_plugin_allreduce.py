"""All-reduce through stock NCCL (PyTorch), one configuration per run; checks, then times.

Run by scripts/gpu-plugin-allreduce.sh under torchrun, once per (configuration, ranks):

    torchrun --standalone --nproc-per-node 2 scripts/gpu_plugin_allreduce.py \
        --label weft --out results.jsonl

Correctness first: for each size, every rank all-reduces float32 tensors of random integers
(exact in float32, so the sum does not depend on the reduction order) and compares every
element with a reference summed on the CPU from the same seeded generators. Then it times
the all-reduce (warm-up, then iterations between barriers) and reports nccl-tests' algbw and
busbw (busbw = algbw * 2 (n - 1) / n). Rank 0 appends one JSON line per size to --out.

    python3 scripts/gpu_plugin_allreduce.py --table results.jsonl    # prints the comparison
"""

import argparse
import json
import os
import sys
import time

MIB = 1 << 20


def parse_sizes(text):
    out = []
    for part in text.split(","):
        part = part.strip().upper()
        if part.endswith("K"):
            out.append(int(part[:-1]) * 1024)
        elif part.endswith("M"):
            out.append(int(part[:-1]) * MIB)
        else:
            out.append(int(part))
    return out


def human(nbytes):
    for unit, div in (("GiB", 1 << 30), ("MiB", MIB), ("KiB", 1024)):
        if nbytes >= div and nbytes % div == 0:
            return f"{nbytes // div} {unit}"
    return f"{nbytes} B"


def rank_data(torch, count, rank, seed):
    gen = torch.Generator().manual_seed(seed * 1000 + rank)
    return torch.randint(-1000, 1001, (count,), generator=gen, dtype=torch.int32).to(torch.float32)


def thread_times():
    """CPU seconds used so far by each thread of this process, summed by thread name."""
    tick = os.sysconf("SC_CLK_TCK")
    out = {}
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/stat") as f:
                stat = f.read()
        except OSError:
            continue  # the thread ended
        name = stat[stat.index("(") + 1 : stat.rindex(")")]
        fields = stat[stat.rindex(")") + 2 :].split()
        # utime and stime are fields 14 and 15 of stat(5); fields[0] here is field 3.
        cpu = (int(fields[11]) + int(fields[12])) / tick
        key = name.rstrip("0123456789")
        total, count = out.get(key, (0.0, 0))
        out[key] = (total + cpu, count + 1)
    return out


def thread_report(before, after, seconds):
    """'name xN: P%' for the busiest thread names: where the CPU went while timing."""
    rows = []
    for name, (cpu, count) in after.items():
        used = cpu - before.get(name, (0.0, 0))[0]
        if used > 0:
            rows.append((used / seconds * 100, name, count))
    rows.sort(reverse=True)
    return ", ".join(f"{name} x{count}: {pct:.0f}%" for pct, name, count in rows[:8])


def check(torch, dist, count, rank, world, seed):
    """All-reduces random integers; returns the number of wrong elements (0 = correct)."""
    x = rank_data(torch, count, rank, seed).cuda()
    dist.all_reduce(x)
    torch.cuda.synchronize()
    ref = torch.zeros(count, dtype=torch.float32)
    for r in range(world):
        ref += rank_data(torch, count, r, seed)
    wrong = int((x.cpu() != ref).sum())
    return wrong


def run(args):
    import torch
    import torch.distributed as dist

    rank = int(os.environ["RANK"])
    world = int(os.environ["WORLD_SIZE"])
    local = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local)
    # The CPU reference runs in every rank at once: share the cores instead of oversubscribing.
    torch.set_num_threads(max(1, (os.cpu_count() or 1) // world))
    nccl_version = torch.cuda.nccl.version()
    if isinstance(nccl_version, tuple):
        nccl_version = ".".join(str(v) for v in nccl_version)
    dist.init_process_group("nccl", device_id=torch.device("cuda", local))

    # Odd element counts first: catch partial chunks and off-by-one slicing.
    wrong_odd = 0
    for i, count in enumerate((1, 7, 1000003, 4 * MIB + 5)):
        wrong_odd += check(torch, dist, count, rank, world, seed=17 + i)

    rows = []
    for i, size in enumerate(parse_sizes(args.sizes)):
        count = size // 4
        wrong = check(torch, dist, count, rank, world, seed=101 + i)
        x = torch.zeros(count, dtype=torch.float32, device="cuda")  # stays finite
        iters = max(args.min_iters, min(args.max_iters, (4 << 30) // size))
        for _ in range(args.warmup):
            dist.all_reduce(x)
        torch.cuda.synchronize()
        dist.barrier()
        threads_before = thread_times()
        start = time.perf_counter()
        for _ in range(iters):
            dist.all_reduce(x)
        torch.cuda.synchronize()
        wall = time.perf_counter() - start
        threads = thread_report(threads_before, thread_times(), wall)
        elapsed = wall / iters
        # The slowest rank defines the time.
        t = torch.tensor([elapsed], dtype=torch.float64, device="cuda")
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        w = torch.tensor([wrong + (wrong_odd if i == 0 else 0)], dtype=torch.int64, device="cuda")
        dist.all_reduce(w)
        elapsed = float(t.item())
        algbw = size / elapsed / 1e9
        busbw = algbw * 2 * (world - 1) / world
        rows.append(
            {
                "label": args.label,
                "ranks": world,
                "bytes": size,
                "time_us": elapsed * 1e6,
                "algbw": algbw,
                "busbw": busbw,
                "wrong": int(w.item()),
                "iters": iters,
                "nccl": str(nccl_version),
                "torch": torch.__version__,
            }
        )
        if rank == 0:
            r = rows[-1]
            print(
                f"RESULT {args.label:>12} ranks {world} {human(size):>9} "
                f"{r['time_us']:12.1f} us algbw {algbw:7.2f} GB/s busbw {busbw:7.2f} GB/s "
                f"#wrong {r['wrong']}",
                flush=True,
            )
            print(f"THREADS {args.label:>12} ranks {world} {human(size):>9} rank 0: {threads}", flush=True)
    if rank == 0:
        with open(args.out, "a") as f:
            for r in rows:
                f.write(json.dumps(r) + "\n")
    dist.barrier()
    dist.destroy_process_group()


def table(path, baseline):
    rows = [json.loads(line) for line in open(path) if line.strip()]
    labels = []
    for r in rows:
        if r["label"] not in labels:
            labels.append(r["label"])
    by = {(r["label"], r["ranks"], r["bytes"]): r for r in rows}
    keys = sorted({(r["ranks"], r["bytes"]) for r in rows})
    ok = all(r["wrong"] == 0 for r in rows)
    versions = sorted({f"NCCL {r['nccl']}, PyTorch {r['torch']}" for r in rows})
    print()
    print(f"all-reduce float32, busbw in GB/s ({'; '.join(versions)})")
    head = ["ranks", "size"] + labels
    ratio = "weft" in labels and baseline in labels
    if ratio:
        head.append(f"weft / {baseline}")
    head.append("#wrong")
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for ranks, size in keys:
        cells = [str(ranks), human(size)]
        wrong = 0
        for label in labels:
            r = by.get((label, ranks, size))
            cells.append(f"{r['busbw']:.2f}" if r else "-")
            wrong += r["wrong"] if r else 0
        if ratio:
            w, b = by.get(("weft", ranks, size)), by.get((baseline, ranks, size))
            cells.append(f"{w['busbw'] / b['busbw']:.2f}x" if w and b and b["busbw"] > 0 else "-")
        cells.append(str(wrong))
        print("| " + " | ".join(cells) + " |")
    print()
    print("every element correct" if ok else "WRONG RESULTS: see #wrong")
    return 0 if ok else 1


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--label", default="run")
    ap.add_argument("--out", default="allreduce.jsonl")
    ap.add_argument("--sizes", default="64K,1M,8M,64M,128M,512M")
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--min-iters", type=int, default=5)
    ap.add_argument("--max-iters", type=int, default=50)
    ap.add_argument("--table", metavar="JSONL", help="print the comparison table and exit")
    ap.add_argument("--baseline", default="socket4x4", help="label weft is compared with")
    args = ap.parse_args()
    if args.table:
        sys.exit(table(args.table, args.baseline))
    run(args)


if __name__ == "__main__":
    main()
