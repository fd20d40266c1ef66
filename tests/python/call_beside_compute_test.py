#!/usr/bin/env python3
"""Tests of research/rigs/call_beside_compute.py: its bad arguments are refused by
name, and on loopback (when torch is installed) two ranks print one line per
size with each figure for both ranks."""
import contextlib
import io
import os
import subprocess
import sys
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(HERE, "..", "..", "research", "rigs", "call_beside_compute.py")
# PYTHONPATH holds scripts/ and research/rigs/ (tests/CMakeLists.txt; by hand: docs/testing.md).
import call_beside_compute as C  # noqa: E402


class Arguments(unittest.TestCase):
    def test_bad_arguments_are_refused_by_name(self):
        for bad in ("--collective=broadcast", "--sizes=4", "--sizes=64k", "--compute-ms=0", "--calls=0",
                    "--repeats=-1", "--rate=fast"):
            err = io.StringIO()
            with self.assertRaises(SystemExit, msg=bad), contextlib.redirect_stderr(err):
                C.parse_args([bad])
            self.assertIn(bad.split("=")[0], err.getvalue())
            self.assertIn(bad.split("=")[1], err.getvalue())

    def test_defaults_are_loopback_all_gather_of_four_sizes(self):
        a, _ = C.parse_args([])
        self.assertIsNone(a.rate)
        self.assertEqual((a.collective, a.sizes), ("all-gather", [16384, 65536, 262144, 1048576]))


class Loopback(unittest.TestCase):
    def test_two_ranks_print_each_figure_for_both(self):
        try:
            import torch.distributed  # noqa: F401
        except ImportError:
            self.skipTest("torch is not installed")
        out = subprocess.run([sys.executable, SCRIPT, "--sizes=4096,65536", "--calls=2", "--repeats=1",
                              "--compute-ms=0.5"], capture_output=True, text=True, timeout=300)
        self.assertEqual(out.returncode, 0, out.stderr)
        lines = [x for x in out.stdout.splitlines() if x.lstrip()[:1].isdigit()]
        self.assertEqual([x.split()[0] for x in lines], ["4096", "65536"])
        for line in lines:
            for name in ("alone", "beside-exposed", "serial-extra", "ends-after"):
                self.assertRegex(line, name + r" -?\d+\.\d\d/-?\d+\.\d\d")


if __name__ == "__main__":
    unittest.main()
