#!/usr/bin/env python3
"""Where the socket backend's messages spend their time (traces from WEFT_SOCKET_TRACE).

Run a job with WEFT_SOCKET_TRACE=<directory> (every process of it on one host, so that the
two ends of each connection share CLOCK_MONOTONIC), then:

    scripts/socket_trace.py <directory>

Each connection end wrote weft-trace-<pid>-<connection id>-<send|recv>.tsv with lines
`seq event ns bytes` (P posted, M matched, H bytes handed to / taken from the kernel, D test
reported done). The two ends of a connection share its id and number messages alike, so for
each message this prints (microseconds, median and 90th percentile over all connections):

    send P->H     isend to the last byte handed to the kernel
    send H->D     last byte handed over to the proxy's test seeing it done
    send->match   isend to the receiver matching its data frame to a posted buffer
    match->H      matched to the last byte taken from the kernel
    recv H->D     last byte received to the proxy's test seeing it done
    hop           isend to the receiver's test seeing it done: the plugin's share of a hop
    recv early    how long before the isend its receive was posted (negative: after)
    send gap      from one isend to the next on the same connection (the GPU's pace)

and how often the caller (NCCL's proxy) called isend, irecv and test, and how long it spent
inside them.
"""

import collections
import os
import re
import statistics
import sys

NAME = re.compile(r"weft-trace-(\d+)-([0-9a-f]{16})-(send|recv)\.tsv$")


def load(directory):
    """{conn_id: {"send": {seq: {event: (ns, bytes)}}, "recv": {...}}}, and
    {(role, call): [calls, ns]} summed over every file."""
    conns = collections.defaultdict(dict)
    calls = collections.defaultdict(lambda: [0, 0])
    for name in sorted(os.listdir(directory)):
        m = NAME.match(name)
        if not m:
            continue
        _, conn, role = m.groups()
        events = collections.defaultdict(dict)
        with open(os.path.join(directory, name)) as f:
            for line in f:
                parts = line.split()
                if parts[:1] == ["#"] and len(parts) == 6:
                    # "# test calls N ns TOTAL": time the caller spent inside the plugin.
                    calls[(role, parts[1])][0] += int(parts[3])
                    calls[(role, parts[1])][1] += int(parts[5])
                    continue
                if len(parts) != 4:
                    continue
                seq, event, ns, nbytes = int(parts[0]), parts[1], int(parts[2]), int(parts[3])
                # A receive's P is numbered by receives posted, the rest by messages.
                events[seq].setdefault(event, (ns, nbytes))
        conns[conn][role] = events
    return conns, calls


def spans(conns):
    """{metric: [microseconds]} over every message seen by both ends of its connection."""
    out = collections.defaultdict(list)
    for ends in conns.values():
        send, recv = ends.get("send"), ends.get("recv")
        if send is None or recv is None:
            continue
        previous = None
        for seq in sorted(send):
            s, r = send[seq], recv.get(seq, {})

            def add(metric, a, b):
                if a is not None and b is not None:
                    out[metric].append((b[0] - a[0]) / 1000)

            add("send P->H", s.get("P"), s.get("H"))
            add("send H->D", s.get("H"), s.get("D"))
            add("send->match", s.get("P"), r.get("M"))
            add("match->H", r.get("M"), r.get("H"))
            add("recv H->D", r.get("H"), r.get("D"))
            add("hop", s.get("P"), r.get("D"))
            add("recv early", r.get("P"), s.get("P"))
            if previous is not None:
                add("send gap", previous, s.get("P"))
            previous = s.get("P")
    return out


def percentile(values, q):
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def report(conns, calls=None):
    lines = []
    paired = [ends for ends in conns.values() if "send" in ends and "recv" in ends]
    pairs = len(paired)
    sizes = collections.Counter(
        ev["P"][1] for ends in paired for ev in ends["send"].values() if "P" in ev
    )
    common = ", ".join(f"{n} x {b} B" for b, n in sizes.most_common(3))
    lines.append(f"{pairs} connections with both ends traced; most common sends: {common or '-'}")
    data = spans(conns)
    order = ["send P->H", "send H->D", "send->match", "match->H", "recv H->D", "hop",
             "recv early", "send gap"]
    lines.append(f"{'us':>12} {'count':>8} {'median':>9} {'p90':>9} {'mean':>9}")
    for metric in order:
        values = data.get(metric)
        if not values:
            continue
        lines.append(
            f"{metric:>12} {len(values):8d} {statistics.median(values):9.1f} "
            f"{percentile(values, 0.9):9.1f} {statistics.fmean(values):9.1f}"
        )
    if calls:
        messages = sum(len(ends["send"]) for ends in paired)
        lines.append("time inside the plugin (every traced end):")
        for (role, call), (n, ns) in sorted(calls.items()):
            if n:
                lines.append(
                    f"{role:>6} {call:>6} {n:10d} calls, {ns / n / 1000:7.2f} us each, "
                    f"{ns / 1e9:8.3f} s in all, {n / max(messages, 1):8.1f} per message"
                )
    return "\n".join(lines)


def main(argv):
    if len(argv) != 2 or not os.path.isdir(argv[1]):
        print(__doc__)
        return 2
    conns, calls = load(argv[1])
    if not conns:
        print(f"no weft-trace-*.tsv files in {argv[1]}")
        return 1
    print(report(conns, calls))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
