#!/usr/bin/env python3
"""Checks tests/data/torch_schedules.txt, the per-rank action orders pmp's
looped-bfs, zbv and dualpipev tables are tested against
(tests/model_parallel_test.cpp), with the installed torch's own schedule
classes: regenerated, it must be the same file (but its torch version line)."""
import os
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
DATA = os.path.join(HERE, "..", "data")


def body(path):
    with open(path) as f:
        return [line for line in f if not line.startswith("#")]


class TorchSchedules(unittest.TestCase):
    def test_file_is_what_torch_produces(self):
        try:
            import torch.distributed.pipelining  # noqa: F401
        except ImportError:
            self.skipTest("torch is not installed")
        with tempfile.TemporaryDirectory() as tmp:
            out = os.path.join(tmp, "t.txt")
            subprocess.run([sys.executable, os.path.join(DATA, "make_torch_schedules.py"), out], check=True)
            self.assertEqual(body(out), body(os.path.join(DATA, "torch_schedules.txt")))


if __name__ == "__main__":
    unittest.main()
