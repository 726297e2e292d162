"""PyTorch's distributed test suite on NVIDIA's NCCL and on weft's libnccl: the Python half of
scripts/torch-dist-suite.sh (which says how to run it). Standard library only.

    torch_dist_suite.py plan --collected collect.log --shard 1/2 --jobs 4 --out DIR
        the node ids `pytest --collect-only -q` printed, sorted, the shard kept (every N-th
        test from the I-th: shards of equal size and mixed cost, since heavy tests share a
        prefix such as test_ddp_), dealt round-robin into DIR/job-<j>.txt (and DIR/tests.txt)
    pytest -p torch_dist_suite ...   (with TORCH_DIST_SUITE_LOG=FILE and this folder on PYTHONPATH)
        a pytest plugin: one JSON line per test start and per report, flushed as it happens,
        so a job that its deadline kills still leaves every result it reached (pytest writes a
        --junitxml file only when its session ends, which a killed job never does)
    torch_dist_suite.py merge --logs DIR --sides "nccl weft" --out DIR [--meta key=value ...]
        DIR/<side>-<j>.jsonl (and <side>-<j>.rc, the job's exit status) into one result per
        test and side; prints the table, the differences and the totals; writes summary.md and
        results.json; exits 1 when a test passes on NCCL and not on weft
    torch_dist_suite.py lib-check
        under torchrun: which libnccl.so.2 the process mapped, NCCL's version as torch sees it,
        and one all_reduce checked
    torch_dist_suite.py --self-test
        the plan, the merge, the table and the error-line extraction on made-up reports

Results: passed, failed, error (setup or teardown failed, or pytest died during the test),
timeout (pytest-timeout's per-test limit), skipped (with the reason's first words), not run
(never reached, or cut off when the job's time ran out: not a failure).
"""

import argparse
import json
import os
import re
import sys
import time

STATUSES = ("passed", "failed", "error", "timeout", "skipped", "not run")
# A test that passed on NCCL and ends in one of these on weft fails the run.
NOT_PASSING = ("failed", "error", "timeout", "skipped")
ERROR_LINE_MAX = 200
# What the JSON lines keep of a report's long texts (the whole is in the job's pytest log).
TEXT_KEEP = 20000


# ---- the pytest plugin ------------------------------------------------------------------


def _log(record):
    path = os.environ.get("TORCH_DIST_SUITE_LOG")
    if not path:
        return
    # Opened, written and closed per line, so that a kill loses at most the line being
    # written (the merge skips a torn one).
    with open(path, "a", encoding="utf-8") as f:
        f.write(json.dumps(record) + "\n")


def pytest_runtest_logstart(nodeid, location):
    _log({"event": "start", "test": nodeid, "t": time.time()})


def pytest_runtest_logreport(report):
    rec = {
        "event": "report",
        "test": report.nodeid,
        "when": report.when,
        "outcome": report.outcome,
        "duration": round(getattr(report, "duration", 0.0), 3),
    }
    if getattr(report, "wasxfail", None) is not None:
        rec["xfail"] = True
    longrepr = report.longrepr
    if report.outcome == "skipped" and isinstance(longrepr, tuple) and len(longrepr) == 3:
        rec["reason"] = str(longrepr[2])
    elif report.outcome == "failed":
        crash = getattr(longrepr, "reprcrash", None)
        rec["message"] = crash.message if crash is not None else str(longrepr).split("\n")[0]
        rec["text"] = report.longreprtext[-TEXT_KEEP:]
        # The ranks' output (fd capture takes the spawned processes' too): NCCL's and weft's
        # warnings land here.
        out = "\n".join(f"---- {name}\n{content}" for name, content in report.sections)
        if out:
            rec["output"] = out[-TEXT_KEEP:]
    _log(rec)


# ---- the plan ---------------------------------------------------------------------------


def parse_collected(text):
    """The node ids of `pytest --collect-only -q` output, sorted and without repeats."""
    ids = set()
    for line in text.splitlines():
        line = line.strip()
        if "::" in line and not line.startswith(("ERROR", "FAILED", "=")) and " " not in line:
            ids.add(line)
    return sorted(ids)


def parse_shard(text):
    m = re.fullmatch(r"(\d+)/(\d+)", text)
    if not m or not 1 <= int(m.group(1)) <= int(m.group(2)):
        raise ValueError(f"--shard {text!r}: expected I/N with 1 <= I <= N")
    return int(m.group(1)), int(m.group(2))


def shard(tests, i, n):
    """The I-th (1-based) of N equal shards: every N-th test from the I-th."""
    return tests[i - 1 :: n]


def deal(tests, jobs):
    """Round-robin into `jobs` lists (fewer when there are fewer tests)."""
    jobs = max(1, min(jobs, len(tests)))
    return [tests[j::jobs] for j in range(jobs)]


def cmd_plan(args):
    with open(args.collected, encoding="utf-8", errors="replace") as f:
        tests = parse_collected(f.read())
    collected = len(tests)
    i, n = parse_shard(args.shard)
    tests = shard(tests, i, n)
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "tests.txt"), "w", encoding="utf-8") as f:
        f.writelines(t + "\n" for t in tests)
    lists = deal(tests, args.jobs) if tests else []
    for j, part in enumerate(lists):
        with open(os.path.join(args.out, f"job-{j}.txt"), "w", encoding="utf-8") as f:
            f.writelines(t + "\n" for t in part)
    print(f"{collected} collected, {len(tests)} in shard {i}/{n}, {len(lists)} job(s) per side")
    return 0 if tests else 1


# ---- results ----------------------------------------------------------------------------


def short_name(nodeid):
    return nodeid.rsplit("::", 1)[-1]


def skip_label(reason, words=6):
    reason = re.sub(r"^Skipped:\s*", "", (reason or "").strip())
    parts = reason.split()
    text = " ".join(parts[:words]) + (" ..." if len(parts) > words else "")
    return f"skipped ({text})" if text else "skipped"


def _strip_pytest_prefix(text):
    # pytest's long form prefixes an exception's lines with "E   ".
    return "\n".join(re.sub(r"^E {1,3}", "", line) for line in text.splitlines())


def _compact(line):
    """A message line without what costs room and says little: an exception's module path
    (torch.distributed.DistBackendError), where in PyTorch's source an NCCL error was seen,
    NCCL's advice to rerun with NCCL_DEBUG; other source paths down to file:line."""
    line = line.strip()
    line = re.sub(r"^(?:[a-z_][\w]*\.)+(?=[A-Z]\w*:)", "", line)
    line = re.sub(r"NCCL error in: \S+:\d+, ", "NCCL error: ", line)
    line = re.sub(r"\s*\(run with NCCL_DEBUG=\w+ for details\)", "", line)
    line = re.sub(r"(?<![\w.])/(?:[^\s/:,'\"]+/)+([^\s/:,'\"]+:\d+)", r"\1", line)
    return line


def _cut(line, limit=ERROR_LINE_MAX):
    return line if len(line) <= limit else line[: limit - 3].rstrip() + "..."


_EXC = re.compile(
    r"^(?:[A-Za-z_][\w]*\.)*[A-Za-z_]\w*(?:Error|Exception|Exit|Interrupt|Failure|Failed|Timeout)\b:?"
)
# The ranks' output lines that say most about a rank that died or hung, best first: NCCL's
# (and weft's) warnings, a C++ exception's what(), NCCL's last error, any error, a crash.
_HINTS = [
    re.compile(p)
    for p in (
        r"NCCL WARN",
        r"what\(\):",
        r"Last error",
        r"[A-Za-z]Error:|error:",
        r"Segmentation fault|terminate called|core dumped|Fatal Python error",
    )
]
# pytest-timeout's failure: "Timeout >120.0s" (1.x), "Timeout (>120.0s) from pytest-timeout." (2.x).
TIMEOUT_MESSAGE = re.compile(r"(?:Failed: )?Timeout \(?>")
RANK_TIMEOUT = re.compile(r"Process \d+ terminated or timed out after")
_PROCESS = re.compile(r"Process \d+ exited with error code \d+ and exception:[ \t]*$", re.M)


def _exception_line(lines):
    """The first line after a traceback's frames (or the first exception-looking line), and
    NCCL's "Last error:" text when the message carries one."""
    picked = None
    in_frames = False
    for k, line in enumerate(lines):
        if line.startswith("Traceback (most recent call last)"):
            in_frames = True
            continue
        if in_frames:
            if line.startswith((" ", "\t")) or not line.strip():
                continue
            picked = k
            break
        if _EXC.match(line):
            picked = k
            break
    if picked is None:
        return None
    text = _compact(lines[picked])
    # NCCL's error text continues on later lines: "ncclInvalidUsage: ...", "Last error:", the
    # library's own message (weft's names the call and the reason).
    for k in range(picked + 1, min(picked + 12, len(lines))):
        line = lines[k].strip()
        if line.startswith(("Exception raised from", "frame #", "Traceback")):
            break
        if line == "Last error:" and k + 1 < len(lines) and lines[k + 1].strip():
            text += " | Last error: " + _compact(lines[k + 1])
            break
        if line.startswith("Last error:") and len(line) > len("Last error:"):
            text += " | " + _compact(line)
            break
    return text


def error_line(message, text="", output=""):
    """One line, at most ERROR_LINE_MAX characters, naming what went wrong in a failed test.

    MultiProcessTestCase reports a rank's exception as "Process 0 exited with error code 10
    and exception:" then the rank's traceback: the line wanted is that traceback's exception
    (e.g. torch.distributed.DistBackendError: NCCL error ... ncclGroupEnd ...). Generic
    messages (a rank killed by a signal, a rank that timed out) get the first telling line of
    the ranks' output after them.
    """
    body = _strip_pytest_prefix(message or text or "")
    m = _PROCESS.search(body)
    if m:
        rest = body[m.end() :]
        nxt = _PROCESS.search(rest)
        segment = rest[: nxt.start()] if nxt else rest
        found = _exception_line(segment.splitlines())
        if found:
            return _cut(found)
    lines = [line for line in body.splitlines() if line.strip()]
    found = _exception_line(lines) or (_compact(lines[0]) if lines else "")
    generic = re.search(r"exit code|terminated or timed out|timed out after", found) or TIMEOUT_MESSAGE.match(
        found
    )
    if generic and output:
        out_lines = _strip_pytest_prefix(output).splitlines()
        hint = next((line for h in _HINTS for line in out_lines if h.search(line)), None)
        if hint:
            found += " | " + _compact(hint)
    return _cut(found)


def results_of_job(lines, rc):
    """{nodeid: (status, detail)} from one job's JSON lines; rc is the job's exit status
    (124 or 137: cut off by its deadline)."""
    reports, order = {}, []
    for raw in lines:
        raw = raw.strip()
        if not raw:
            continue
        try:
            rec = json.loads(raw)
        except ValueError:
            continue  # a line torn by a kill
        t = rec.get("test")
        if t not in reports:
            reports[t] = []
            order.append(t)
        if rec.get("event") == "report":
            reports[t].append(rec)
    out = {}
    for t in order:
        out[t] = classify(reports[t], rc)
    return out


def classify(reports, rc):
    by = {r["when"]: r for r in reports}
    setup, call, teardown = by.get("setup"), by.get("call"), by.get("teardown")

    def failure(r, default):
        msg = r.get("message", "")
        if TIMEOUT_MESSAGE.match(msg):
            return "timeout", _cut(re.sub(r"^Failed: ", "", msg.splitlines()[0]))
        line = error_line(msg, r.get("text", ""), r.get("output", ""))
        # MultiProcessTestCase's own deadline (DISTRIBUTED_TESTS_DEFAULT_TIMEOUT): a rank
        # still running when it passed.
        if RANK_TIMEOUT.search(msg):
            return "timeout", line
        return default, line

    for r in (setup, call):
        if r and r["outcome"] == "skipped":
            if r.get("xfail"):
                return "passed", "expected failure"
            return "skipped", r.get("reason", "")
    if setup and setup["outcome"] == "failed":
        return failure(setup, "error")
    if call and call["outcome"] == "failed":
        return failure(call, "failed")
    if teardown and teardown["outcome"] == "failed":
        return failure(teardown, "error")
    if call and call["outcome"] == "passed":
        return "passed", ""
    # Started, never finished: the job ended during this test.
    if rc in (124, 137, 143, None):
        return "not run", "cut off: the job's time ran out during this test"
    return "error", f"pytest ended (exit {rc}) during this test"


def load_side(logs, side):
    """Every job of one side: {nodeid: (status, detail)}."""
    res = {}
    for name in sorted(os.listdir(logs)):
        m = re.fullmatch(re.escape(side) + r"-(\d+)\.jsonl", name)
        if not m:
            continue
        rc = None
        rc_path = os.path.join(logs, f"{side}-{m.group(1)}.rc")
        if os.path.exists(rc_path):
            with open(rc_path, encoding="utf-8") as f:
                txt = f.read().strip()
            rc = int(txt) if txt.lstrip("-").isdigit() else None
        with open(os.path.join(logs, name), encoding="utf-8", errors="replace") as f:
            res.update(results_of_job(f.readlines(), rc))
    return res


def label(status, detail):
    if status == "skipped":
        return skip_label(detail)
    if status == "not run" and detail.startswith("cut off"):
        return "not run (cut off)"
    return status


def compare(tests, by_side, sides):
    """One row per test: {test, name, <side>: {status, detail}, differs, note}."""
    rows = []
    for t in tests:
        row = {"test": t, "name": short_name(t)}
        for s in sides:
            st, detail = by_side[s].get(t, ("not run", ""))
            row[s] = {"status": st, "detail": detail}
        row["differs"] = False
        row["note"] = ""
        if "nccl" in sides and "weft" in sides:
            n, w = row["nccl"], row["weft"]
            if "not run" not in (n["status"], w["status"]) and n["status"] != w["status"]:
                row["differs"] = True
                if w["status"] in ("failed", "error", "timeout"):
                    row["note"] = w["detail"]
                elif n["status"] in ("failed", "error", "timeout"):
                    row["note"] = "(NCCL's: " + n["detail"] + ")"
                elif w["status"] == "skipped":
                    row["note"] = _cut("weft skipped: " + re.sub(r"^Skipped:\s*", "", w["detail"] or ""))
        elif len(sides) == 1 and row[sides[0]]["status"] in ("failed", "error", "timeout"):
            row["note"] = row[sides[0]]["detail"]
        rows.append(row)
    return rows


def regressions(rows):
    """Tests that pass on NCCL and, having run on weft, do not pass there."""
    return [
        r["name"]
        for r in rows
        if "nccl" in r
        and "weft" in r
        and r["nccl"]["status"] == "passed"
        and r["weft"]["status"] in NOT_PASSING
    ]


def totals(rows, sides):
    return {s: {st: sum(1 for r in rows if r[s]["status"] == st) for st in STATUSES} for s in sides}


def _md(text):
    return text.replace("|", "\\|").replace("\n", " ")


def table(rows, sides, only_differ=False):
    last = "weft's first error line (where they differ)" if len(sides) > 1 else "first error line"
    head = ["test"] + list(sides) + [last]
    out = ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
    for r in rows:
        if only_differ and not r["differs"]:
            continue
        cells = [f"`{r['name']}`"] + [label(r[s]["status"], r[s]["detail"]) for s in sides] + [r["note"]]
        out.append("| " + " | ".join(_md(c) for c in cells) + " |")
    return "\n".join(out)


def totals_lines(tot, sides):
    lines = []
    for s in sides:
        parts = [f"{tot[s][st]} {st}" for st in STATUSES if tot[s][st]]
        lines.append(f"{s}: " + (", ".join(parts) if parts else "no tests"))
    return lines


def cmd_merge(args):
    sides = args.sides.split()
    meta = dict(kv.split("=", 1) for kv in args.meta)
    with open(os.path.join(args.logs, "tests.txt"), encoding="utf-8") as f:
        tests = [line.strip() for line in f if line.strip()]
    by_side = {s: load_side(args.logs, s) for s in sides}
    rows = compare(tests, by_side, sides)
    tot = totals(rows, sides)
    bad = regressions(rows)
    differ = [r for r in rows if r["differs"]]
    head = [
        f"PyTorch {meta.get('torch', '?')} distributed suite (`{meta.get('file', 'test_distributed_spawn.py')}`), "
        f"{meta.get('date', time.strftime('%Y-%m-%d'))}, {meta.get('gpu', '?')}: "
        f"world size {meta.get('world', '?')}, shard {meta.get('shard', '1/1')}, "
        f"selection {('-k ' + repr(meta['k'])) if meta.get('k') else 'all tests'}, "
        f"{meta.get('jobs', '?')} job(s) per side, per-test limit {meta.get('per_test', '?')} s.",
    ]
    for key in ("nccl_lib", "weft_lib"):
        if meta.get(key):
            head.append(f"{key.split('_')[0]}'s library: {meta[key]}")
    summary = (
        "\n\n".join(
            [
                "\n".join(head),
                table(rows, sides),
                "Totals: " + "; ".join(totals_lines(tot, sides)) + ".",
                (
                    f"Where weft differs from NCCL ({len(differ)}): "
                    + ", ".join(f"`{r['name']}`" for r in differ)
                    if differ
                    else ("Where weft differs from NCCL: nowhere." if len(sides) > 1 else "")
                ),
            ]
        ).rstrip()
        + "\n"
    )
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "summary.md"), "w", encoding="utf-8") as f:
        f.write(summary)
    with open(os.path.join(args.out, "results.json"), "w", encoding="utf-8") as f:
        json.dump(
            {
                "meta": meta,
                "sides": sides,
                "totals": tot,
                "differs": [r["name"] for r in differ],
                "passes_on_nccl_not_on_weft": bad,
                "tests": rows,
            },
            f,
            indent=1,
        )
    # The table first, the differences and totals last: a caller that keeps only the tail of
    # the output (the device tool keeps 12,000 characters) still sees them.
    print("\n".join(head))
    print(table(rows, sides))
    if differ:
        print(f"\n== where weft differs from NCCL ({len(differ)})")
        print(table(rows, sides, only_differ=True))
    print("\n== totals (" + f"{len(tests)} tests)")
    for line in totals_lines(tot, sides):
        print("   " + line)
    if bad:
        print(f"   {len(bad)} pass on NCCL and not on weft: " + " ".join(bad))
    return 1 if bad else 0


# ---- the library check (under torchrun) ---------------------------------------------------


def cmd_lib_check(_args):
    import torch
    import torch.distributed as dist

    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    dev = torch.device("cuda", int(os.environ.get("LOCAL_RANK", rank)))
    torch.cuda.set_device(dev)
    dist.init_process_group("nccl", device_id=dev)
    x = torch.full((1000,), float(rank + 1), device=dev)
    dist.all_reduce(x)
    want = world * (world + 1) / 2
    ok = bool((x == want).all().item())
    with open("/proc/self/maps", encoding="utf-8") as f:
        libs = sorted({line.split()[-1] for line in f if "libnccl" in line and "/" in line})
    print(
        f"rank {rank}: libnccl mapped: {' '.join(libs) or 'none'}; torch.cuda.nccl.version() "
        f"{'.'.join(map(str, torch.cuda.nccl.version()))}; all_reduce {'ok' if ok else 'WRONG'}",
        flush=True,
    )
    dist.destroy_process_group()
    return 0 if ok else 1


# ---- self-test --------------------------------------------------------------------------

_CHILD_TB = """Traceback (most recent call last):
  File "/usr/lib/python3/site-packages/torch/testing/_internal/common_distributed.py", line 970, in run_test
    getattr(self, test_name)()
  File "/usr/lib/python3/site-packages/torch/distributed/distributed_c10d.py", line 2806, in all_reduce
    work = group.allreduce([tensor], opts)
           ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^
torch.distributed.DistBackendError: NCCL error in: /pytorch/torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:3690, invalid usage (run with NCCL_DEBUG=WARN for details), NCCL version 2.28.3
ncclInvalidUsage: This usually reflects invalid usage of NCCL library.
Last error:
ncclGroupEnd: 17 sends in one group: weft allows 16 (P2P_MAX_OPS)
Exception raised from throw at /pytorch/torch/csrc/distributed/c10d/NCCLUtils.cpp:77 (most recent call first):
frame #0: c10::Error::Error() + 0x1
"""


def _self_test():
    # Collection output, shard and deal.
    collected = (
        "f.py::C::test_b\nf.py::C::test_a\nf.py::C::test_c\nf.py::C::test_a\n\n3 tests collected in 1.2s\n"
    )
    tests = parse_collected(collected)
    assert tests == ["f.py::C::test_a", "f.py::C::test_b", "f.py::C::test_c"], tests
    assert shard(tests, 1, 2) == ["f.py::C::test_a", "f.py::C::test_c"]
    assert shard(tests, 2, 2) == ["f.py::C::test_b"]
    assert sum(len(shard(list(range(281)), i, 3)) for i in (1, 2, 3)) == 281
    assert deal(tests, 2) == [["f.py::C::test_a", "f.py::C::test_c"], ["f.py::C::test_b"]]
    assert deal(tests[:1], 4) == [["f.py::C::test_a"]]
    assert parse_shard("2/3") == (2, 3)
    for bad in ("0/3", "4/3", "x"):
        try:
            parse_shard(bad)
        except ValueError:
            pass
        else:
            raise AssertionError(bad)

    # The error line: a rank's DistBackendError with weft's last error, behind pytest's "E   ".
    msg = "RuntimeError: Process 1 exited with error code 10 and exception:\n" + _CHILD_TB + "\n"
    line = error_line(msg)
    assert line.startswith(
        "DistBackendError: NCCL error: invalid usage, NCCL version 2.28.3 | Last error: ncclGroupEnd"
    ), line
    assert line.endswith(
        "| Last error: ncclGroupEnd: 17 sends in one group: weft allows 16 (P2P_MAX_OPS)"
    ), line
    assert len(line) <= ERROR_LINE_MAX
    assert error_line("\n".join("E   " + x for x in msg.splitlines())) == line
    # Two ranks: the first one's; a plain assertion inside the rank's test.
    two = msg + "Process 2 exited with error code 10 and exception:\nTraceback (most recent call last):\n"
    two += "  x\nValueError: other\n"
    assert error_line(two) == line
    tb = "Process 0 exited with error code 10 and exception:\nTraceback (most recent call last):\n"
    tb += (
        '  File "t.py", line 3\nAssertionError: Tensor-likes are not close!\n\nMismatched elements: 3 / 10\n'
    )
    assert error_line("RuntimeError: " + tb) == "AssertionError: Tensor-likes are not close!"
    # Generic messages take a hint from the ranks' output; long lines are cut.
    out = (
        "---- Captured stderr call\nloading\nterminate called after throwing an instance of 'c10::Error'\n"
        "host:1:2 [0] NCCL WARN Cuda failure 'out of memory'\n"
    )
    got = error_line("AssertionError: -6 != 0 : Expected zero exit code but got -6 for pid: 42", "", out)
    want = "AssertionError: -6 != 0 : Expected zero exit code but got -6 for pid: 42"
    assert got == want + " | host:1:2 [0] NCCL WARN Cuda failure 'out of memory'", got
    long = error_line("ValueError: " + "x" * 500)
    assert len(long) == ERROR_LINE_MAX and long.endswith("..."), long
    assert (
        skip_label("Skipped: Need at least 4 CUDA devices to run this test")
        == "skipped (Need at least 4 CUDA devices ...)"
    )
    assert skip_label("") == "skipped"

    # One job's lines: passed, failed, skipped in setup or call, a per-test timeout, a
    # teardown error, an expected failure, a test cut off, a torn last line.
    def rep(t, when, outcome, **kw):
        return json.dumps(dict(event="report", test=t, when=when, outcome=outcome, **kw))

    def start(t):
        return json.dumps({"event": "start", "test": t})

    lines = [
        start("f::p"),
        rep("f::p", "setup", "passed"),
        rep("f::p", "call", "passed"),
        rep("f::p", "teardown", "passed"),
        start("f::f"),
        rep("f::f", "setup", "passed"),
        rep("f::f", "call", "failed", message=msg),
        rep("f::f", "teardown", "passed"),
        start("f::s"),
        rep("f::s", "setup", "skipped", reason="Skipped: c10d was not compiled with MPI"),
        rep("f::s", "teardown", "passed"),
        start("f::sc"),
        rep("f::sc", "setup", "passed"),
        rep("f::sc", "call", "skipped", reason="Need at least 4 CUDA devices"),
        rep("f::sc", "teardown", "passed"),
        start("f::t"),
        rep("f::t", "setup", "passed"),
        rep("f::t", "call", "failed", message="Failed: Timeout >120.0s"),
        rep("f::t", "teardown", "passed"),
        start("f::e"),
        rep("f::e", "setup", "passed"),
        rep("f::e", "call", "passed"),
        rep("f::e", "teardown", "failed", message="OSError: [Errno 39] Directory not empty: '/tmp/x'"),
        start("f::x"),
        rep("f::x", "setup", "passed"),
        rep("f::x", "call", "skipped", xfail=True, reason=""),
        rep("f::x", "teardown", "passed"),
        start("f::cut"),
        rep("f::cut", "setup", "passed"),
        '{"event": "rep',
    ]
    got = results_of_job(lines, 124)
    assert got["f::p"] == ("passed", "")
    assert got["f::f"] == ("failed", line)
    assert got["f::s"] == ("skipped", "Skipped: c10d was not compiled with MPI")
    assert got["f::sc"] == ("skipped", "Need at least 4 CUDA devices")
    assert got["f::t"] == ("timeout", "Timeout >120.0s"), got["f::t"]
    assert got["f::e"] == ("error", "OSError: [Errno 39] Directory not empty: '/tmp/x'"), got["f::e"]
    assert got["f::x"] == ("passed", "expected failure")
    assert got["f::cut"][0] == "not run" and "cut off" in got["f::cut"][1]
    assert results_of_job(lines, 1)["f::cut"] == ("error", "pytest ended (exit 1) during this test")
    assert label(*got["f::cut"]) == "not run (cut off)" and label("not run", "") == "not run"
    t2 = results_of_job(
        [rep("f::t2", "call", "failed", message="Failed: Timeout (>5.0s) from pytest-timeout.")], 0
    )
    assert t2["f::t2"] == ("timeout", "Timeout (>5.0s) from pytest-timeout."), t2
    t3 = results_of_job(
        [
            rep(
                "f::t3",
                "call",
                "failed",
                message="RuntimeError: Process 1 terminated or timed out after 95.2 seconds",
                output="---- Captured stderr call\nhost:1:2 [1] NCCL WARN weft: peer 0 silent for 90 s\n",
            )
        ],
        0,
    )
    assert t3["f::t3"] == (
        "timeout",
        "RuntimeError: Process 1 terminated or timed out after 95.2 seconds | "
        "host:1:2 [1] NCCL WARN weft: peer 0 silent for 90 s",
    ), t3

    # Two sides compared; "not run" on either side is no difference and no failure.
    tests = ["f::p", "f::f", "f::s", "f::t", "f::n", "f::w"]
    nccl = {
        "f::p": ("passed", ""),
        "f::f": ("passed", ""),
        "f::s": ("skipped", "Need 4"),
        "f::t": ("passed", ""),
        "f::n": ("passed", ""),
        "f::w": ("failed", "ValueError: nccl's"),
    }
    weft = {
        "f::p": ("passed", ""),
        "f::f": ("failed", line),
        "f::s": ("skipped", "Need 4"),
        "f::t": ("timeout", "per-test timeout"),
        "f::w": ("passed", ""),
    }
    rows = compare(tests, {"nccl": nccl, "weft": weft}, ["nccl", "weft"])
    assert [r["differs"] for r in rows] == [False, True, False, True, False, True]
    assert rows[1]["note"] == line and rows[5]["note"] == "(NCCL's: ValueError: nccl's)"
    assert rows[4]["weft"]["status"] == "not run"
    skip = compare(
        ["f::v"],
        {"nccl": {"f::v": ("passed", "")}, "weft": {"f::v": ("skipped", "Skipped: Requires NCCL 2.28.9")}},
        ["nccl", "weft"],
    )
    assert skip[0]["differs"] and skip[0]["note"] == "weft skipped: Requires NCCL 2.28.9", skip
    assert regressions(skip) == ["v"]
    assert regressions(rows) == ["f", "t"], regressions(rows)
    tot = totals(rows, ["nccl", "weft"])
    assert tot["nccl"]["passed"] == 4 and tot["weft"]["not run"] == 1 and tot["weft"]["timeout"] == 1
    t = table(rows, ["nccl", "weft"]).splitlines()
    assert t[0] == "| test | nccl | weft | weft's first error line (where they differ) |", t[0]
    assert t[1] == "| --- | --- | --- | --- |"
    assert t[4] == "| `s` | skipped (Need 4) | skipped (Need 4) |  |", t[4]
    assert len(table(rows, ["nccl", "weft"], only_differ=True).splitlines()) == 2 + 3
    assert _md("a|b\nc") == "a\\|b c"
    print("torch_dist_suite self-test: ok")
    return 0


def main(argv):
    if argv[1:] == ["--self-test"]:
        return _self_test()
    p = argparse.ArgumentParser(
        description="The helpers of scripts/torch-dist-suite.sh (this file's docstring says what each does)."
    )
    sub = p.add_subparsers(dest="cmd", required=True)
    a = sub.add_parser("plan")
    a.add_argument("--collected", required=True)
    a.add_argument("--shard", default="1/1")
    a.add_argument("--jobs", type=int, default=4)
    a.add_argument("--out", required=True)
    a = sub.add_parser("merge")
    a.add_argument("--logs", required=True)
    a.add_argument("--sides", default="nccl weft")
    a.add_argument("--out", required=True)
    a.add_argument("--meta", action="append", default=[], help="key=value for the summary's heading")
    sub.add_parser("lib-check")
    args = p.parse_args(argv[1:])
    if args.cmd == "plan":
        try:
            parse_shard(args.shard)
        except ValueError as e:
            p.error(str(e))
    return {"plan": cmd_plan, "merge": cmd_merge, "lib-check": cmd_lib_check}[args.cmd](args)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
