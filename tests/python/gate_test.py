#!/usr/bin/env python3
"""Unit tests of the regression gate's rules (scripts/ddpbench_py/gate.py) on hand-built
rows: these check the rules' arithmetic and edge cases (MAD of 0, workload
matching, causes), not any measured figure; tests/e2e/nightly.sh checks the
gate on real nights."""
import unittest

# PYTHONPATH holds scripts/ and research/rigs/ (tests/CMakeLists.txt; by hand: docs/testing.md).
from ddpbench_py import gate


def row(night, tput, **cells):
    base = {"run_id": night, "entry": "ddp-2x1", "strategy": "ddp", "gpus": "2", "nodes": "1", "model": "resnet18",
            "width": "4", "throughput_img_s": str(tput), "peak_mem_mb": "100", "accuracy": "0.80",
            "timestamp": night, "git_sha": "abc", "torch_version": "2.11.0", "command": "ddpbench --steps=6"}
    base.update(cells)
    return base


def check(tonight, history, failures=()):
    """The former fixed-floor rule (the changepoint rule is changepoints_test.py's)."""
    return gate.check([tonight], history, list(failures), gate.Limits(rule="fixed"))


class GateTest(unittest.TestCase):
    def test_identical_history_uses_the_noise_floor(self):
        history = [row("n1", 100), row("n2", 100)]  # MAD 0: the floor (5% x k=3) decides
        self.assertEqual(check(row("t", 90), history)[1], 0)
        lines, n = check(row("t", 80), history)
        self.assertEqual(n, 1)
        self.assertRegex(lines[0], r"^REGRESSION ddp-2x1 throughput_img_s: tonight 80.00, reference 100.00 "
                                   r"\(median of 2; bound 85.00")

    def test_wide_history_widens_the_bound(self):
        history = [row(f"n{i}", v) for i, v in enumerate([100, 80, 120, 90, 110])]  # MAD 10
        self.assertEqual(check(row("t", 60), history)[1], 0)   # bound 100 - 3 x 14.8
        self.assertEqual(check(row("t", 50), history)[1], 1)

    def test_memory_parity_accuracy(self):
        history = [row("n1", 100)]
        self.assertEqual(check(row("t", 100, peak_mem_mb="104"), history)[1], 0)
        lines, n = check(row("t", 100, peak_mem_mb="106", parity_ok="false", parity_max_abs_diff="1e-2",
                             accuracy="0.70"), history)
        self.assertEqual(n, 3)
        self.assertEqual([l.split()[2] for l in lines if l.startswith("REGRESSION")],
                         ["peak_mem_mb:", "parity:", "accuracy:"])

    def test_other_workload_is_new_not_compared(self):
        lines, n = check(row("t", 10, width="8"), [row("n1", 100)])
        self.assertEqual(n, 0)
        self.assertIn("new      ddp-2x1", lines[1])
        self.assertIn("another workload (width=4) are not mixed in", lines[0])

    def test_environment_and_option_changes_are_named_as_causes(self):
        lines, n = check(row("t", 50, torch_version="2.12.0", command="ddpbench --steps=6 --threads-per-device=1"),
                         [row("n1", 100)])
        self.assertEqual(n, 1)
        self.assertIn("  likely cause: torch_version 2.11.0 -> 2.12.0", lines)
        self.assertIn("  likely cause: options +--threads-per-device=1", lines)

    def test_row_below_its_expected_throughput_is_flagged_with_its_largest_term(self):
        slow = row("t", 70, expected_img_s="100.0", vs_expected="0.700", expected_term="exposed_comm")
        lines, n = check(slow, [])  # flagged without any history
        self.assertEqual(n, 0)
        self.assertRegex(lines[0], r"^SLOWER THAN EXPECTED ddp-2x1: 70.0 img/s is 0.70 of the 100.0 img/s .* "
                                   r"largest term: exposed_comm$")
        self.assertEqual(gate.check([slow], [], [], gate.Limits(rule="fixed", expected_fails=True))[1], 1)
        self.assertEqual(check(row("t", 85, expected_img_s="100.0", vs_expected="0.850"), [])[0],
                         ["new      ddp-2x1: no earlier night of this workload"])
        self.assertFalse(any("EXPECTED" in l for l in check(row("t", 70), [])[0]))  # no prediction: no flag

    def test_row_off_its_predicted_memory_is_flagged(self):
        off = row("t", 100, peak_mem_mb="130.0", memory_expected_mb="100.0", memory_vs_expected="1.300")
        lines, n = check(off, [])
        self.assertEqual(n, 0)
        self.assertRegex(lines[0], r"^MEMORY OFF ITS PREDICTION ddp-2x1: 130.0 MB is 1.30 of the 100.0 MB predicted")
        self.assertEqual(gate.check([off], [], [], gate.Limits(rule="fixed", expected_fails=True))[1], 1)
        near = row("t", 100, peak_mem_mb="110.0", memory_expected_mb="100.0", memory_vs_expected="1.100")
        self.assertFalse(any("MEMORY OFF" in l for l in check(near, [])[0]))
        under = row("t", 100, peak_mem_mb="70.0", memory_expected_mb="100.0", memory_vs_expected="0.700")
        self.assertTrue(any("MEMORY OFF" in l for l in check(under, [])[0]))

    def test_failed_entry_is_a_regression(self):
        lines, n = check(row("t", 100), [row("n1", 100)],
                         [{"entry": "pmp-2x1", "exit_code": "2", "reason": "--chunks=0: must be at least 1"}])
        self.assertEqual(n, 1)
        self.assertIn("REGRESSION pmp-2x1 run: failed tonight (exit 2): --chunks=0: must be at least 1", lines)

    def test_a_nights_launches_are_judged_once_by_their_median(self):
        history = [row("n1", 100), row("n2", 100)]
        tonight = [row("t", 99), row("t", 70), row("t", 101)]  # one slow launch: the median, 99, is judged
        lines, n = gate.check(tonight, history, [], gate.Limits(rule="fixed"))
        self.assertEqual(n, 0, lines)
        lines, n = gate.check([row("t", 70), row("t", 72), row("t", 101)], history, [], gate.Limits(rule="fixed"))
        self.assertEqual(n, 1)
        self.assertEqual(sum(l.startswith("REGRESSION") for l in lines), 1)
        self.assertIn("tonight 72.00", lines[0])

    def test_one_launchs_parity_failure_is_not_folded_away(self):
        tonight = [row("t", 99), row("t", 100, parity_ok="false", parity_max_abs_diff="3e-2"), row("t", 101)]
        lines, n = gate.check(tonight, [row("n1", 100)], [], gate.Limits(rule="fixed"))
        self.assertEqual(n, 1)
        self.assertIn("REGRESSION ddp-2x1 parity: tonight 3e-2", lines[0])


class MatrixLaunchesTest(unittest.TestCase):
    def load(self, text):
        import os
        import tempfile
        import nightly
        with tempfile.NamedTemporaryFile("w", suffix=".toml", delete=False) as f:
            f.write(text)
        try:
            return nightly.load_matrix(f.name)
        finally:
            os.unlink(f.name)

    def test_launches_is_the_drivers_key_not_a_flag(self):
        import nightly
        defaults, runs = self.load('[defaults]\nlaunches = 3\nsteps = 6\n[[run]]\nname = "a"\nstrategy = "single"\n'
                                   '[[run]]\nname = "b"\nstrategy = "single"\nlaunches = 1\n')
        self.assertEqual(nightly.as_flags(defaults), ["--steps=6"])
        args = type("Args", (), {"launches": None})()
        self.assertEqual([nightly.launches_of(args, defaults, r) for r in runs], [3, 1])
        args.launches = 5
        self.assertEqual(nightly.launches_of(args, defaults, runs[1]), 5)

    def test_bad_launches_are_named(self):
        import nightly
        for text, says in [('launches = 0\n', "launches=0: must be an integer >= 1"),
                           ('launches = "3"\n', "launches='3': must be an integer >= 1"),
                           ('launches = true\n', "launches=True: must be an integer >= 1")]:
            with self.assertRaises(nightly.MatrixError) as e:
                self.load(f'[[run]]\nname = "a"\nstrategy = "single"\n{text}')
            self.assertIn(says, str(e.exception))
        with self.assertRaises(nightly.MatrixError) as e:
            self.load('[defaults]\nlaunches = -2\n[[run]]\nname = "a"\nstrategy = "single"\n')
        self.assertIn("[defaults] launches=-2: must be an integer >= 1", str(e.exception))


if __name__ == "__main__":
    unittest.main()
