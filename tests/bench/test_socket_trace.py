"""Tests of scripts/socket_trace.py on a hand-written trace of one connection.

    python3 -m unittest discover -s tests/bench -v
"""
import os
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(HERE)), "scripts"))

import socket_trace  # noqa: E402

CONN = "00000000deadbeef"
# Two 1 MiB messages; times in ns. Message 1 is sent 1000 us after message 0.
SEND = """0\tP\t1000000\t1048576
0\tH\t1050000\t0
0\tD\t1060000\t0
1\tP\t2000000\t1048576
1\tH\t2040000\t0
1\tD\t2041000\t0
# isend calls 2 ns 3000
# irecv calls 0 ns 0
# test calls 10 ns 20000
"""
RECV = """0\tP\t900000\t0
1\tP\t950000\t0
0\tM\t1010000\t1048576
0\tH\t1070000\t0
0\tD\t1075000\t0
1\tM\t2020000\t1048576
1\tH\t2080000\t0
1\tD\t2090000\t0
"""


class TraceTest(unittest.TestCase):
    def test_spans_pair_the_two_ends_by_connection_and_message(self):
        with tempfile.TemporaryDirectory() as d:
            for pid, role, text in ((10, "send", SEND), (11, "recv", RECV)):
                with open(os.path.join(d, f"weft-trace-{pid}-{CONN}-{role}.tsv"), "w") as f:
                    f.write(text)
            # A file of another connection with only one end is ignored.
            with open(os.path.join(d, "weft-trace-12-0000000000000001-send.tsv"), "w") as f:
                f.write(SEND)
            conns, calls = socket_trace.load(d)
            spans = socket_trace.spans(conns)
            # Both send files count (the unpaired one too).
            self.assertEqual(calls[("send", "test")], [20, 40000])
            self.assertEqual(calls[("send", "isend")], [4, 6000])
            self.assertEqual(spans["send P->H"], [50.0, 40.0])
            self.assertEqual(spans["send->match"], [10.0, 20.0])
            self.assertEqual(spans["match->H"], [60.0, 60.0])
            self.assertEqual(spans["recv H->D"], [5.0, 10.0])
            self.assertEqual(spans["hop"], [75.0, 90.0])
            self.assertEqual(spans["recv early"], [100.0, 1050.0])
            self.assertEqual(spans["send gap"], [1000.0])
            text = socket_trace.report(conns, calls)
            self.assertIn("test         20 calls,    2.00 us each", text)
            self.assertIn("1 connections with both ends traced", text)
            self.assertIn("2 x 1048576 B", text)
            self.assertEqual(socket_trace.main(["socket_trace.py", d]), 0)


if __name__ == "__main__":
    unittest.main()
