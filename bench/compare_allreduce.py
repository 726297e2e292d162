#!/usr/bin/env python3
"""Compares all-reduce runs printed in nccl-tests' columns: weft against its baselines.

    python3 bench/compare_allreduce.py --weft weft.txt --mpi mpi.txt --gloo gloo.txt

Reads each file's data rows (`size count type redop root` then time, algbw, busbw, #wrong out
of place and again in place), refuses a run with a wrong element, and prints per size the
bus bandwidth of each and weft's ratio to each baseline, then the smallest size's times and
the issue's goals (including: at least each baseline's speed at every size both measured).
weft and MPI are read from their out-of-place columns; Gloo from its
in-place ones, because torch's all_reduce has no out-of-place form (the script that runs it
times copy + all_reduce there). A ratio is computed from the times (same size and ranks, so
it equals the busbw ratio) and so stays exact where busbw rounds to 0.00.
Exits 1 on a wrong result or a file without rows, 0 otherwise (a missed goal is reported).
"""
import argparse
import sys

# The goals of the issue: at the largest size that both measured, weft's busbw is at least this
# many times each baseline's (MPI: strictly above); the smallest size takes under LATENCY_GOAL_US.
BANDWIDTH_GOALS = {"mpi": (1.0, "above"), "gloo": (2.0, "at least")}
LATENCY_GOAL_US = 50.0


class Row:
    def __init__(self, fields):
        self.size = int(fields[0])
        self.count = int(fields[1])
        self.type, self.redop = fields[2], fields[3]
        self.oop = (float(fields[5]), float(fields[6]), float(fields[7]), fields[8])
        self.ip = (float(fields[9]), float(fields[10]), float(fields[11]), fields[12])


def parse_all(text):
    """Data rows of nccl-tests-style output, by size, in order: a size measured several times
    (runs appended to one file, `--rounds`) has several rows. Other lines (comments, logs) are
    skipped.

    A row has 13 fields: size count type redop root, then time algbw busbw #wrong twice;
    #wrong may read N/A, as in nccl-tests runs without validation.
    """
    rows = {}
    for line in text.splitlines():
        fields = line.split()
        if len(fields) != 13 or line.lstrip().startswith("#"):
            continue
        try:
            row = Row(fields)
        except ValueError:
            continue
        rows.setdefault(row.size, []).append(row)
    return rows


def parse(text):
    """The last data row of each size (see parse_all)."""
    return {size: rows[-1] for size, rows in parse_all(text).items()}


def wrong_count(text):
    return 0 if text == "N/A" else int(text)


def human_size(nbytes):
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if nbytes >= scale and nbytes % scale == 0:
            return f"{nbytes // scale} {unit}"
    return f"{nbytes} B"


def load(label, path, column):
    """{size: (time us, busbw GB/s)} from `column` ("oop" or "ip") of a file; a size measured
    several times gives its median time (the middle run, or the faster of the middle two)."""
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            rows = parse_all(f.read())
    except OSError as err:
        raise SystemExit(f"compare_allreduce: cannot read the {label} output {path}: {err.strerror}")
    if not rows:
        raise SystemExit(f"compare_allreduce: no nccl-tests data row in the {label} output {path}; "
                         "see that file for what the run printed")
    bad = [(r.size, r.oop[3], r.ip[3]) for runs in rows.values() for r in runs
           if wrong_count(r.oop[3]) or wrong_count(r.ip[3])]
    if bad:
        sizes = ", ".join(f"{human_size(s)} (#wrong {o} / {i})" for s, o, i in bad)
        raise SystemExit(f"compare_allreduce: {label} gave wrong results at {sizes}: its timings mean nothing")
    picked = {}
    for size, runs in rows.items():
        measured = sorted((getattr(r, column)[0], getattr(r, column)[2]) for r in runs)
        picked[size] = measured[(len(measured) - 1) // 2]
    return picked


def report(runs):
    """runs: list of (label, column name, {size: (time, busbw)}); the first is weft if present."""
    has_weft = runs[0][0] == "weft"
    baselines = runs[1:] if has_weft else runs
    all_sizes = sorted(set().union(*(r[2] for r in runs)))
    head = ["size"]
    for label, column, _ in runs:
        head.append(f"{label} busbw")
        if has_weft and label != "weft":
            head.append(f"weft/{label}")
    widths = [max(10, len(h)) for h in head]
    out = ["  ".join(f"{h:>{w}}" for h, w in zip(head, widths)) + "   (busbw in GB/s; "
           + ", ".join(f"{label} {column}" for label, column, _ in runs) + ")"]
    weft = runs[0][2] if has_weft else {}
    for size in all_sizes:
        cells = [human_size(size)]
        for label, _, data in runs:
            cells.append(f"{data[size][1]:.2f}" if size in data else "-")
            if has_weft and label != "weft":
                cells.append(f"{data[size][0] / weft[size][0]:.2f}x" if size in data and size in weft else "-")
        out.append("  ".join(f"{c:>{w}}" for c, w in zip(cells, widths)))

    smallest = all_sizes[0]
    times = ", ".join(f"{label} {data[smallest][0]:.2f} us" for label, _, data in runs if smallest in data)
    out.append(f"\n{human_size(smallest)} all-reduce time: {times}")

    if has_weft:
        out.append("\ngoals:")
        if smallest in weft:
            t = weft[smallest][0]
            out.append(f"  {human_size(smallest)} under {LATENCY_GOAL_US:g} us: {t:.2f} us -> "
                       f"{'MET' if t < LATENCY_GOAL_US else 'MISSED'}")
        for label, _, data in baselines:
            factor, how = BANDWIDTH_GOALS.get(label, (1.0, "above"))
            common = set(data) & set(weft)
            if not common:
                out.append(f"  busbw against {label}: no size measured by both")
                continue
            largest = max(common)
            ours, theirs = weft[largest][1], data[largest][1]
            met = ours > factor * theirs if how == "above" else ours >= factor * theirs
            want = f"{how} {factor:g}x {label}" if factor != 1.0 else f"{how} {label}"
            out.append(f"  {human_size(largest)} busbw {want}: {ours:.2f} vs {theirs:.2f} GB/s "
                       f"({data[largest][0] / weft[largest][0]:.2f}x) -> {'MET' if met else 'MISSED'}")
            # Issue 11: at least the baseline's speed at every size both measured.
            slower = [s for s in sorted(common) if weft[s][0] > data[s][0]]
            if slower:
                worst = max(slower, key=lambda s: weft[s][0] / data[s][0])
                out.append(f"  every size at least as fast as {label}: MISSED at "
                           + ", ".join(human_size(s) for s in slower)
                           + f" (worst {human_size(worst)}: {data[worst][0] / weft[worst][0]:.2f}x)")
            else:
                out.append(f"  every size at least as fast as {label}: {len(common)} sizes -> MET")
    return "\n".join(out)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--weft", help="weft perf all-reduce output (out-of-place columns)")
    parser.add_argument("--mpi", help="mpi_allreduce output (out-of-place columns)")
    parser.add_argument("--gloo", help="gloo_allreduce.py output (in-place columns)")
    args = parser.parse_args()
    runs = [(label, column, load(label, path, column))
            for label, column, path in (("weft", "oop", args.weft), ("mpi", "oop", args.mpi),
                                        ("gloo", "ip", args.gloo)) if path]
    if not runs:
        parser.error("give at least one of --weft, --mpi, --gloo")
    print(report([(label, "out-of-place" if c == "oop" else "in-place", d) for label, c, d in runs]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
