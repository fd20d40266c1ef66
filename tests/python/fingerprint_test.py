#!/usr/bin/env python3
"""The environment fingerprint the gate names as a regression's likely cause
(scripts/ddpbench_py/rows.py FINGERPRINT, gate.py): a changed CPU capability
(cpu_isa) or machine (machine_id) is named like a changed driver, under a
change point, under one bad night and under the fixed rule; rows of an older
ddpbench, which lack those columns, are read without a crash and without a
made-up change. Hand-made histories, in memory and as night files read by
scripts/report.py --against."""
import csv
import os
import subprocess
import sys
import tempfile
import unittest

# PYTHONPATH holds scripts/ (tests/CMakeLists.txt; by hand: docs/testing.md).
from ddpbench_py import gate, rows as R

SCRIPTS = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts"))
# A fixed wobble of about +-1.5%, so every history is the same on every run.
WOBBLE = [0.3, -1.2, 1.1, -0.4, 1.5, -1.4, 0.6, -0.2, 1.3, -0.9, 0.1, -1.5, 0.8, -0.6, 1.0, -1.1]
NEW = {"cpu_isa": "avx512", "machine_id": "3f9a01c2"}


def row(night, tput, **cells):
    base = {"run_id": night, "entry": "single-1x1", "strategy": "single", "gpus": "1", "nodes": "1",
            "device": "cpu", "model": "resnet18", "width": "4", "throughput_img_s": f"{tput:.2f}",
            "step_ms_p50": f"{8000 / tput:.2f}", "peak_mem_mb": "100", "accuracy": "0.80",
            "timestamp": f"2026-12-01 {night}", "git_sha": "a1",
            "torch_version": "2.11.0", "host": "vm", "command": "ddpbench --steps=6"}
    base.update(cells)
    return base


def nights(values, changed_from=None, change=None, old=False):
    """Rows n00, n01, ... at the given throughputs (each with WOBBLE), in the
    environment NEW, or with `change` over it from night changed_from on;
    old=True: rows of an older ddpbench, without the two columns at all."""
    out = []
    for i, v in enumerate(values):
        cells = {} if old else dict(NEW)
        if changed_from is not None and i >= changed_from:
            cells.update(change)
        out.append(row(f"n{i:02d}", v + WOBBLE[i % len(WOBBLE)], **cells))
    return out


def run(history, limits=None):
    *past, tonight = history
    # One night judged alone (--confirm=1): the planted change is the last night.
    return gate.check([tonight], past, [], limits or gate.Limits(matrix="m.toml", confirm=1))


def under(lines, head):
    """The indented lines printed under the first line starting with head."""
    i = next(i for i, l in enumerate(lines) if l.startswith(head))
    out = []
    for l in lines[i + 1:]:
        if not l.startswith("  "):
            break
        out.append(l.strip())
    return out


class LikelyCauseTest(unittest.TestCase):
    def test_fingerprint_has_both_columns(self):
        for column in ("cpu_isa", "machine_id", "driver_version", "host"):
            self.assertIn(column, R.FINGERPRINT)

    def test_cpu_isa_change_is_named_under_the_change_point(self):
        # 12 nights on AVX-512 kernels, then 3 on AVX2 ones 20% slower; the git revision unchanged.
        history = nights([100] * 12 + [80] * 3, changed_from=12, change={"cpu_isa": "avx2"})
        lines, n = run(history)
        self.assertGreaterEqual(n, 1, lines)
        head = "REGRESSION single-1x1 throughput_img_s: change point"
        self.assertTrue(any(l.startswith(head) and "last good night n11 (git a1), first bad night n12 (git a1)" in l
                            for l in lines), lines)
        self.assertEqual(under(lines, head)[0], "changed between them: cpu_isa avx512 -> avx2")

    def test_cpu_isa_change_is_named_under_one_bad_night(self):
        history = nights([100] * 12 + [75], changed_from=12, change={"cpu_isa": "default"})
        lines, n = run(history)
        self.assertEqual(n, 2, lines)  # throughput and step time
        head = "REGRESSION single-1x1 throughput_img_s: tonight"
        self.assertIn("outside this entry's noise", next(l for l in lines if l.startswith(head)))
        self.assertEqual(under(lines, head), ["likely cause: cpu_isa avx512 -> default"])

    def test_sustained_loss_names_the_change_at_its_first_night(self):
        history = nights([100] * 12 + [90, 90, 90], changed_from=12, change={"cpu_isa": "avx2"})
        history[3]["throughput_img_s"] = "85.00"  # one low night long ago: only the streak rule sees the loss
        limits = gate.Limits(k=3, confirm=2, alpha=1e-12, matrix="m.toml")  # no change points
        lines, n = run(history, limits)
        self.assertGreaterEqual(n, 1, lines)
        head = "REGRESSION single-1x1 throughput_img_s: the last 3 nights"
        self.assertTrue(next(l for l in lines if l.startswith(head)).endswith("a sustained loss)"), lines)
        # n12 against n11, not tonight against n13 (both on avx2).
        self.assertEqual(under(lines, head), ["likely cause: cpu_isa avx512 -> avx2"])

    def test_another_machine_of_the_same_host_name_is_named(self):
        history = nights([100] * 12 + [75], changed_from=12, change={"machine_id": "77d0e4b9"})
        lines, n = run(history)
        self.assertEqual(n, 2, lines)
        causes = under(lines, "REGRESSION single-1x1 throughput_img_s")
        self.assertEqual(causes, ["likely cause: machine_id 3f9a01c2 -> 77d0e4b9"])  # host is vm on both

    def test_fixed_rule_names_both_with_the_driver(self):
        past = [row("n1", 100, **NEW, driver_version="550.1"), row("n2", 100, **NEW, driver_version="550.1")]
        tonight = row("t9", 60, cpu_isa="avx2", machine_id="77d0e4b9", driver_version="560.2")
        lines, n = gate.check([tonight], past, [], gate.Limits(rule="fixed"))
        self.assertEqual(n, 1, lines)
        self.assertEqual(under(lines, "REGRESSION single-1x1 throughput_img_s"),
                         ["likely cause: driver_version 550.1 -> 560.2", "likely cause: cpu_isa avx512 -> avx2",
                          "likely cause: machine_id 3f9a01c2 -> 77d0e4b9"])

    def test_same_environment_names_no_cause(self):
        lines, n = run(nights([100] * 12 + [75]))
        self.assertEqual(n, 2, lines)
        self.assertEqual(under(lines, "REGRESSION single-1x1 throughput_img_s"), [])

    def test_an_empty_cell_is_a_value(self):
        history = nights([100] * 12 + [75], changed_from=12, change={"cpu_isa": ""})
        self.assertEqual(under(run(history)[0], "REGRESSION single-1x1 throughput_img_s"),
                         ["likely cause: cpu_isa avx512 -> -"])


class OlderRowsTest(unittest.TestCase):
    """Rows written before cpu_isa and machine_id existed."""

    def test_columns_absent_from_the_history_are_not_a_change(self):
        history = nights([100] * 12, old=True) + [row("n12", 75, **NEW)]
        lines, n = run(history)
        self.assertEqual(n, 2, lines)  # still judged against the older nights
        self.assertEqual(under(lines, "REGRESSION single-1x1 throughput_img_s"), [])
        self.assertEqual(R.fingerprint_changes(history[0], history[-1]), [])
        self.assertEqual(R.fingerprint_changes(history[-1], history[0]), [])

    def test_older_nights_and_a_new_one_as_files(self):
        with tempfile.TemporaryDirectory() as d:
            history = nights([100] * 12, old=True) + nights([100] * 13)[12:]
            history += [row("n13", 75, cpu_isa="avx2", machine_id=NEW["machine_id"])]
            for r in history:  # one file a night, each with its own version's header
                with open(os.path.join(d, r["run_id"] + ".csv"), "w", newline="") as f:
                    w = csv.DictWriter(f, fieldnames=list(r))
                    w.writeheader()
                    w.writerow(r)
            with open(os.path.join(d, "n00.csv")) as f:
                self.assertNotIn("cpu_isa", f.readline())
            got = subprocess.run([sys.executable, os.path.join(SCRIPTS, "report.py"), os.path.join(d, "n13.csv"),
                                  f"--against={d}", "--confirm=1"], capture_output=True, text=True,
                                 env=dict(os.environ, PYTHONPATH=SCRIPTS))
            self.assertEqual(got.returncode, 1, got.stdout + got.stderr)
            lines = got.stdout.splitlines()
            self.assertIn("likely cause: cpu_isa avx512 -> avx2", under(lines, "REGRESSION single-1x1 throughput_img_s"))
            self.assertFalse(any("machine_id" in l for l in lines), lines)
            self.assertRegex(lines[-1], r"^gate: 1 row against 13 earlier nights in .*: 2 regressions$")
            # The report's environment line names both where the row has them.
            md = subprocess.run([sys.executable, os.path.join(SCRIPTS, "report.py"), os.path.join(d, "n13.csv")],
                                capture_output=True, text=True, env=dict(os.environ, PYTHONPATH=SCRIPTS))
            self.assertIn("cpu_isa=avx2 machine_id=3f9a01c2", md.stdout.splitlines()[0])


if __name__ == "__main__":
    unittest.main()
