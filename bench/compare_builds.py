#!/usr/bin/env python3
"""Two builds of weft, one `weft perf` output each, side by side (nccl-tests' columns).

    python3 bench/compare_builds.py --before before.txt --after after.txt [--name all-reduce]

Each file may hold several runs of the same command (alternated with the other build's, so
that drift on the machine spreads over both): per size the best out-of-place bus bandwidth
and the shortest out-of-place time of each build are kept. Refuses a file with a wrong
element or without rows; prints per size both busbw figures, both times and the speed ratio
(before's time / after's: above 1 means the after build is faster), then the median ratio. Exits 1 on a wrong result or an
empty file, 0 otherwise (a slower build is reported, not failed).
"""
import argparse
import statistics
import sys

sys.path.insert(0, __file__.rsplit("/", 1)[0])
from compare_gpu import human, parse, wrong  # noqa: E402


def best(text):
    rows = {}
    for run in text.split("# Avg bus bandwidth"):
        for size, (oop, ip) in parse(run).items():
            bad = wrong({size: (oop, ip)})
            if bad:
                raise ValueError(f"wrong elements at {size} B")
            busbw, time = rows.get(size, (0.0, float("inf")))
            rows[size] = (max(busbw, oop[2]), min(time, oop[0]))
    return rows


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--before", required=True)
    ap.add_argument("--after", required=True)
    ap.add_argument("--name", default="")
    a = ap.parse_args()
    try:
        before = best(open(a.before).read())
        after = best(open(a.after).read())
    except ValueError as e:
        print(f"compare_builds: {e}", file=sys.stderr)
        return 1
    sizes = sorted(set(before) & set(after))
    if not sizes:
        print("compare_builds: no common rows", file=sys.stderr)
        return 1
    print(f"# {a.name}: out-of-place, best of the runs; speed = before's time / after's")
    print(f"{'size':>10} {'busbw before':>13} {'after':>9} {'us before':>11} {'after':>9} {'speed':>6}")
    ratios = []
    for s in sizes:
        (bb, bt), (fb, ft) = before[s], after[s]
        r = bt / ft if ft > 0 else float("nan")
        if ft > 0:
            ratios.append(r)
        print(f"{human(s):>10} {bb:13.2f} {fb:9.2f} {bt:11.2f} {ft:9.2f} {r:6.2f}")
    if ratios:
        print(f"# median speed after/before {statistics.median(ratios):.3f}, "
              f"range {min(ratios):.2f}-{max(ratios):.2f} over {len(ratios)} sizes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
