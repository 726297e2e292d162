#!/usr/bin/env python3
"""weft's GPU collectives against NCCL, both printed in nccl-tests' columns.

    python3 bench/compare_gpu.py --weft weft-all_reduce.txt --nccl nccl-all_reduce.txt [--name all-reduce]

Reads the data rows of both (size count type redop root, then time algbw busbw #wrong out of
place and again in place), refuses a run with a wrong element, and prints per size the
out-of-place bus bandwidth and time of each, weft's ratio (from the times: same size, same
ranks), and how far weft's busbw is from NVLink4's ~370 GB/s per direction. Then the issue's
goals: at least 1.0x NCCL from 64 MiB, 0.9x from 1 MiB. Exits 1 on a wrong result or a file
without rows, 0 otherwise (a missed goal is reported, not failed).
"""
import argparse
import sys

NVLINK_LIMIT_GBS = 370.0
GOALS = [(64 << 20, 1.0), (1 << 20, 0.9)]


def parse(text):
    rows = {}
    for line in text.splitlines():
        f = line.split()
        if len(f) < 13 or line.lstrip().startswith("#"):
            continue
        try:
            size = int(f[0])
            oop = (float(f[5]), float(f[6]), float(f[7]), f[8])
            ip = (float(f[9]), float(f[10]), float(f[11]), f[12])
        except ValueError:
            continue
        rows[size] = (oop, ip)
    return rows


def wrong(rows):
    return [s for s, (o, i) in rows.items() if o[3] not in ("0", "N/A") or i[3] not in ("0", "N/A")]


def human(size):
    for unit, shift in (("G", 30), ("M", 20), ("K", 10)):
        if size >= 1 << shift and size % (1 << shift) == 0:
            return f"{size >> shift}{unit}"
    return str(size)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--weft", required=True)
    ap.add_argument("--nccl", required=True)
    ap.add_argument("--name", default="")
    a = ap.parse_args(argv)
    weft = parse(open(a.weft).read())
    nccl = parse(open(a.nccl).read())
    if not weft or not nccl:
        print(f"compare_gpu: no data rows in {a.weft if not weft else a.nccl}", file=sys.stderr)
        return 1
    bad = wrong(weft) + wrong(nccl)
    if bad:
        print(f"compare_gpu: wrong elements at sizes {sorted(set(bad))}", file=sys.stderr)
        return 1
    sizes = sorted(set(weft) & set(nccl))
    print(f"# {a.name}: out-of-place busbw (GB/s) and time (us); ratio = NCCL time / weft time")
    print(f"# {'size':>6} {'weft us':>9} {'nccl us':>9} {'weft bw':>8} {'nccl bw':>8} {'ratio':>6} {'of 370':>6}")
    for s in sizes:
        (wt, _, wb, _), (nt, _, nb, _) = weft[s][0], nccl[s][0]
        ratio = nt / wt if wt > 0 else float("nan")
        print(f"  {human(s):>6} {wt:9.2f} {nt:9.2f} {wb:8.2f} {nb:8.2f} {ratio:6.2f} {wb / NVLINK_LIMIT_GBS:6.1%}")
    for floor, goal in GOALS:
        over = [s for s in sizes if s >= floor]
        if not over:
            continue
        ratio = lambda s: nccl[s][0][0] / weft[s][0][0] if weft[s][0][0] > 0 else float("inf")
        worst = min(over, key=ratio)
        r = ratio(worst)
        verdict = "met" if r >= goal else f"NOT met (short by {goal - r:.2f}x)"
        print(f"# goal {goal:.1f}x NCCL from {human(floor)}: worst {r:.2f}x at {human(worst)}: {verdict}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
