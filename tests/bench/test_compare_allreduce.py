"""Tests of bench/compare_allreduce.py on hand-written nccl-tests-style samples, and (where
mpicc and mpirun exist) of bench/mpi_allreduce.c and (where torch imports) bench/gloo_allreduce.py
end to end on sizes that are not powers of two.

    python3 -m unittest discover -s tests/bench -v
"""
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "bench"))

import compare_allreduce as cmp  # noqa: E402


def sample(name):
    return os.path.join(HERE, name)


def read(name):
    with open(sample(name), encoding="utf-8") as f:
        return f.read()


class ParseTest(unittest.TestCase):
    def test_reads_every_data_row_and_skips_comments_and_logs(self):
        rows = cmp.parse(read("sample-weft-perf.txt"))
        self.assertEqual(sorted(rows), [8, 16, 1024, 1048576, 67108864])
        big = rows[67108864]
        self.assertEqual((big.count, big.type, big.redop), (16777216, "float", "sum"))
        self.assertEqual(big.oop, (10000.0, 6.71, 10.07, "0"))
        self.assertEqual(big.ip, (9800.0, 6.85, 10.27, "0"))
        self.assertEqual(rows[1024].ip[3], "N/A")

    def test_reads_a_real_weft_perf_output(self):
        # Captured from `weft perf` itself, so the parser follows the real format, header included.
        rows = cmp.parse(read("weft-perf-comm-d35faee.txt"))
        self.assertEqual(sorted(rows), [8 << i for i in range(24)])
        for size, row in rows.items():
            self.assertEqual((row.count, row.type, row.redop), (size // 4, "float", "sum"))
            self.assertEqual((row.oop[3], row.ip[3]), ("0", "0"))
        self.assertEqual(rows[67108864].oop, (23099.0, 2.91, 4.36, "0"))

    def test_load_picks_out_of_place_or_in_place_time_and_busbw(self):
        self.assertEqual(cmp.load("weft", sample("sample-weft-perf.txt"), "oop")[1048576], (350.0, 4.49))
        self.assertEqual(cmp.load("gloo", sample("sample-gloo.txt"), "ip")[67108864], (32500.0, 3.10))

    def test_repeated_sizes_give_their_median(self):
        rows = "\n".join(
            f"{8:>12}  {2:>12}  float  sum  -1  {t:7.2f}  0.00  {b:.2f}  0  {t:7.2f}  0.00  {b:.2f}  0"
            for t, b in [(9.0, 0.01), (1.0, 0.09), (3.0, 0.03), (2.0, 0.05)])
        with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as f:
            f.write(rows + "\n")
        try:
            self.assertEqual(len(cmp.parse_all(rows)[8]), 4)
            # Four runs: the faster of the middle two (2.0 and 3.0 us).
            self.assertEqual(cmp.load("weft", f.name, "oop"), {8: (2.0, 0.05)})
        finally:
            os.unlink(f.name)

    def test_wrong_elements_reject_the_run(self):
        text = read("sample-weft-perf.txt").replace(
            "350.0    3.00    4.49      0    340.0", "350.0    3.00    4.49      3    340.0")
        with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as f:
            f.write(text)
        try:
            with self.assertRaises(SystemExit) as caught:
                cmp.load("weft", f.name, "oop")
            self.assertIn("weft gave wrong results at 1 MiB (#wrong 3 / 0)", str(caught.exception.code))
        finally:
            os.unlink(f.name)

    def test_output_without_rows_is_an_error_naming_the_file(self):
        with self.assertRaises(SystemExit) as caught:
            cmp.load("weft", os.path.join(HERE, "test_compare_allreduce.py"), "oop")
        self.assertIn("no nccl-tests data row in the weft output", str(caught.exception.code))


class ReportTest(unittest.TestCase):
    def report(self):
        runs = [("weft", "out-of-place", cmp.load("weft", sample("sample-weft-perf.txt"), "oop")),
                ("mpi", "out-of-place", cmp.load("mpi", sample("sample-mpi.txt"), "oop")),
                ("gloo", "in-place", cmp.load("gloo", sample("sample-gloo.txt"), "ip"))]
        return cmp.report(runs).splitlines()

    def test_table_rows_give_busbw_and_time_ratios(self):
        lines = self.report()
        self.assertEqual(lines[0].split()[:6], ["size", "weft", "busbw", "mpi", "busbw", "weft/mpi"])
        # 64 MiB: mpi 80000 us / weft 10000 us; gloo in place 32500 us / 10000 us.
        self.assertEqual(lines[5].split(), ["64", "MiB", "10.07", "1.26", "8.00x", "3.10", "3.25x"])
        # 16 B: no gloo figure at that size.
        self.assertEqual(lines[2].split(), ["16", "B", "0.00", "0.00", "0.41x", "-", "-"])

    def test_latency_and_goals(self):
        text = "\n".join(self.report())
        self.assertIn("8 B all-reduce time: weft 12.50 us, mpi 5.00 us, gloo 220.00 us", text)
        self.assertIn("8 B under 50 us: 12.50 us -> MET", text)
        self.assertIn("64 MiB busbw above mpi: 10.07 vs 1.26 GB/s (8.00x) -> MET", text)
        self.assertIn("64 MiB busbw at least 2x gloo: 10.07 vs 3.10 GB/s (3.25x) -> MET", text)
        # The samples' weft is slower than mpi up to 1 KiB (8 B: 5.00 / 12.50 = 0.40x).
        self.assertIn("every size at least as fast as mpi: MISSED at 8 B, 16 B, 1 KiB (worst 8 B: 0.40x)",
                      text)

    def test_every_size_goal_met(self):
        weft = cmp.load("weft", sample("sample-weft-perf.txt"), "oop")
        mpi = {size: (time_us * 3.0, busbw) for size, (time_us, busbw) in weft.items()}
        text = cmp.report([("weft", "out-of-place", weft), ("mpi", "out-of-place", mpi)])
        self.assertIn(f"every size at least as fast as mpi: {len(weft)} sizes -> MET", text)

    def test_missed_goal_is_reported(self):
        weft = cmp.load("weft", sample("sample-weft-perf.txt"), "oop")
        weft[67108864] = (20000.0, 5.03)
        weft[8] = (60.0, 0.0)
        gloo = cmp.load("gloo", sample("sample-gloo.txt"), "ip")
        text = cmp.report([("weft", "out-of-place", weft), ("gloo", "in-place", gloo)])
        self.assertIn("8 B under 50 us: 60.00 us -> MISSED", text)
        self.assertIn("64 MiB busbw at least 2x gloo: 5.03 vs 3.10 GB/s (1.62x) -> MISSED", text)


@unittest.skipUnless(shutil.which("mpicc") and shutil.which("mpirun"), "Open MPI is not installed")
class MpiAllreduceTest(unittest.TestCase):
    def test_every_size_checked_and_parsed(self):
        with tempfile.TemporaryDirectory() as tmp:
            exe = os.path.join(tmp, "mpi_allreduce")
            subprocess.run(["mpicc", "-O2", "-Wall", "-Werror", "-o", exe,
                            os.path.join(ROOT, "bench", "mpi_allreduce.c")], check=True)
            root_args = ["--allow-run-as-root"] if os.geteuid() == 0 else []
            run = subprocess.run(["mpirun", *root_args, "--oversubscribe", "-np", "3", exe,
                                  "-b", "12", "-e", "30000", "-f", "3", "-n", "3", "-w", "1"],
                                 capture_output=True, text=True, timeout=300)
            self.assertEqual(run.returncode, 0, run.stderr)
        rows = cmp.parse(run.stdout)
        self.assertEqual(sorted(rows), [12, 36, 108, 324, 972, 2916, 8748, 26244])
        for size, row in rows.items():
            self.assertEqual((row.count, row.type, row.redop), (size // 4, "float", "sum"))
            self.assertEqual((row.oop[3], row.ip[3]), ("0", "0"))
            # busbw = algbw * 2(n-1)/n with n = 3, within the printing's rounding.
            self.assertAlmostEqual(row.oop[2], row.oop[1] * 4 / 3, delta=0.011)
        self.assertIn("# Out of bounds values : 0 OK", run.stdout)


def torch_imports():
    return subprocess.run([sys.executable, "-c", "import torch.distributed"], capture_output=True).returncode == 0


@unittest.skipUnless(torch_imports(), "torch does not import with this python")
class GlooAllreduceTest(unittest.TestCase):
    def test_every_size_checked_and_parsed(self):
        run = subprocess.run([sys.executable, os.path.join(ROOT, "bench", "gloo_allreduce.py"), "--ranks", "3",
                              "-b", "12", "-e", "30000", "-f", "3", "-n", "2", "-w", "1", "--timeout", "300"],
                             capture_output=True, text=True, timeout=360)
        self.assertEqual(run.returncode, 0, run.stderr)
        rows = cmp.parse(run.stdout)
        self.assertEqual(sorted(rows), [12, 36, 108, 324, 972, 2916, 8748, 26244])
        for size, row in rows.items():
            self.assertEqual((row.count, row.oop[3], row.ip[3]), (size // 4, "0", "0"))
        self.assertIn("# Out of bounds values : 0 OK", run.stdout)


if __name__ == "__main__":
    unittest.main()
