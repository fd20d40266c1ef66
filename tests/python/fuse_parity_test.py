#!/usr/bin/env python3
"""research/rigs/fuse_parity.py without a GPU: its refusals (bad --steps, a binary
that is not there, a run that fails) and the difference it reports between two
saved states (which tensors it compares, and which it leaves to the running
statistics column)."""
import os
import subprocess
import sys
import tempfile
import unittest

import torch

SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "research", "rigs", "fuse_parity.py")
# PYTHONPATH holds scripts/ and research/rigs/ (tests/CMakeLists.txt; by hand: docs/testing.md).
import fuse_parity  # noqa: E402


def run(*args):
    return subprocess.run([sys.executable, SCRIPT, *args], capture_output=True, text=True)


class Refusals(unittest.TestCase):
    def test_bad_steps_and_missing_binary_exit_2_naming_the_value(self):
        with tempfile.TemporaryDirectory() as tmp:
            out = os.path.join(tmp, "p.csv")
            r = run("--binary=/bin/true", "--steps=0", f"--out={out}")
            self.assertEqual(r.returncode, 2)
            self.assertIn("--steps=0: must be at least 1", r.stderr)
            r = run(f"--binary={tmp}/absent", f"--out={out}")
            self.assertEqual(r.returncode, 2)
            self.assertIn(f"--binary={tmp}/absent: not an executable file", r.stderr)
            self.assertFalse(os.path.exists(out))

    def test_a_failing_run_is_named_and_nothing_is_written(self):
        with tempfile.TemporaryDirectory() as tmp:
            fake = os.path.join(tmp, "ddpbench")
            with open(fake, "w") as f:
                f.write("#!/bin/sh\necho 'ddpbench: error: --fuse=bn-add-relu: the fusion runs in cuDNN' >&2\nexit 2\n")
            os.chmod(fake, 0o755)
            out = os.path.join(tmp, "p.csv")
            r = run(f"--binary={fake}", f"--out={out}")
            self.assertNotEqual(r.returncode, 0)
            self.assertIn("exited 2", r.stderr)
            self.assertIn("the fusion runs in cuDNN", r.stderr)
            self.assertFalse(os.path.exists(out))


class MaxDiff(unittest.TestCase):
    def test_largest_difference_and_its_name_over_the_picked_float_tensors(self):
        a = {"model.w": torch.zeros(3), "model.bn.running_mean": torch.zeros(2), "step": torch.tensor(5),
             "model.v": torch.ones(2, 2)}
        b = {"model.w": torch.tensor([0.0, -0.25, 0.1]), "model.bn.running_mean": torch.tensor([3.0, 0.0]),
             "step": torch.tensor(9), "model.v": torch.ones(2, 2)}
        params = lambda k: "running" not in k  # noqa: E731
        self.assertEqual(fuse_parity.max_diff(a, b, params), (0.25, "model.w"))
        self.assertEqual(fuse_parity.max_diff(a, b, lambda k: "running" in k), (3.0, "model.bn.running_mean"))
        self.assertEqual(fuse_parity.max_diff(a, a, params), (0.0, ""))


if __name__ == "__main__":
    unittest.main()
