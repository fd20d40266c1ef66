#!/usr/bin/env python3
"""The gate's change-point and noise rules (scripts/ddpbench_py/changepoints.py,
gate.py's changepoint rule) on hand-made histories: a step, a slow drift, a
single outlier that is not a change, an improvement, too little history, and
the bad inputs (another workload, a corrupt or truncated row). Behaviour only;
the measured error rates are docs/nightly.md's."""
import os
import tempfile
import unittest

from ddpbench_py import changepoints, gate, history_page, rows as R

# A fixed wobble of about +-1.5%, so every history is the same on every run.
WOBBLE = [0.3, -1.2, 1.1, -0.4, 1.5, -1.4, 0.6, -0.2, 1.3, -0.9, 0.1, -1.5, 0.8, -0.6, 1.0, -1.1]


def level(values):
    return [v + WOBBLE[i % len(WOBBLE)] for i, v in enumerate(values)]


def row(night, tput, git="a1", **cells):
    base = {"run_id": night, "entry": "ddp-2x1", "strategy": "ddp", "gpus": "2", "nodes": "1", "model": "resnet18",
            "width": "4", "throughput_img_s": f"{tput:.2f}", "step_ms_p50": f"{16000 / tput:.2f}",
            "peak_mem_mb": "100", "accuracy": "0.80", "timestamp": night, "git_sha": git,
            "torch_version": "2.11.0", "command": "ddpbench --steps=6"}
    base.update(cells)
    return base


def nights(values, bad_from=None):
    """Rows n00, n01, ... with git a1 before night bad_from and b2 from it on."""
    return [row(f"n{i:02d}", v, "b2" if bad_from is not None and i >= bad_from else "a1") for i, v in enumerate(values)]


def put(directory, name, text):
    """Writes a night file by hand."""
    with open(os.path.join(directory, name), "w") as f:
        f.write(text)


def gate_lines(history_rows, limits=None):
    *past, tonight = history_rows
    # One night judged alone (--confirm=1); the default's two nights are tested on their own.
    return gate.check([tonight], past, [], limits or gate.Limits(matrix="m.toml", confirm=1))


class DetectTest(unittest.TestCase):
    def test_step_is_one_change_at_its_first_night(self):
        changes = changepoints.detect(level([100] * 12 + [94] * 3))
        self.assertEqual([c.index for c in changes], [12])
        self.assertAlmostEqual(changes[0].ratio, 0.94, delta=0.01)
        self.assertGreater(changes[0].confidence, 0.99)

    def test_single_outlier_is_not_a_change(self):
        for where in (3, 9, 19):
            values = level([100] * 20)
            values[where] = 60
            self.assertEqual(changepoints.detect(values), [], f"outlier at night {where}")

    def test_flat_history_has_no_change(self):
        self.assertEqual(changepoints.detect(level([100] * 30)), [])
        self.assertEqual(changepoints.detect([100.0] * 10), [])

    def test_slow_drift_is_cut_into_steps_going_down(self):
        changes = changepoints.detect([100 - 0.8 * i + 0.3 * WOBBLE[i % 16] for i in range(24)])
        self.assertTrue(changes)
        self.assertTrue(all(c.ratio < 1 for c in changes))

    def test_improvement_is_a_change_upwards(self):
        changes = changepoints.detect(level([100] * 10 + [110] * 4))
        self.assertEqual([(c.index, c.ratio > 1) for c in changes], [(10, True)])

    def test_student_t_tail(self):
        self.assertAlmostEqual(changepoints.t_two_sided_p(2.0, 10), 0.07339, places=4)
        self.assertAlmostEqual(changepoints.t_two_sided_p(4.0, 3), 0.02801, places=4)
        self.assertEqual(changepoints.t_two_sided_p(0.0, 5), 1.0)


class GateRuleTest(unittest.TestCase):
    def test_step_names_size_nights_revisions_and_bisect(self):
        lines, n = gate_lines(nights(level([100] * 12 + [94] * 3), bad_from=12))
        text = "\n".join(lines)
        self.assertEqual(n, 2, text)  # throughput and step time; memory unchanged
        self.assertRegex(text, r"REGRESSION ddp-2x1 throughput_img_s: change point -\d\.\d% \(.* confidence \d+\.\d\d%, p \de-\d+\); "
                               r"last good night n11 \(git a1\), first bad night n12 \(git b2\)")
        self.assertIn("  changed between them: git_sha a1 -> b2", lines)
        self.assertIn("  find the commit: scripts/bisect_slow.py ddp-2x1 a1 b2 --matrix=m.toml --drop=0.0", text)

    def test_outlier_tonight_within_noise_passes_and_far_outside_fails(self):
        quiet = level([100] * 12)
        self.assertEqual(gate_lines(nights(quiet + [97]))[1], 0)
        lines, n = gate_lines(nights(quiet + [80]))
        self.assertEqual(n, 2, lines)  # one bad night: throughput and step time
        self.assertRegex(lines[0], r"^REGRESSION ddp-2x1 throughput_img_s: tonight 80.00, outside this entry's noise: "
                                   r"median .* of 12 nights, bound .* = median - 3 x .*, worst night ")

    def test_confirm_needs_that_many_bad_nights_in_a_row(self):
        quiet = level([100] * 12)
        limits = gate.Limits(k=3, confirm=2, alpha=1e-12, matrix="m.toml")  # the streak alone, no change points
        self.assertEqual(gate_lines(nights(quiet + [80]), limits)[1], 0)        # one bad night: not yet
        self.assertEqual(gate_lines(nights(quiet + [80, 100]), limits)[1], 0)   # and a good one after it
        lines, n = gate_lines(nights(quiet + [92, 91]), limits)
        self.assertGreaterEqual(n, 1, lines)
        self.assertTrue(any(l.startswith("REGRESSION ddp-2x1 throughput_img_s: the last 2 nights 92.00, 91.00, "
                                         "outside this entry's noise: median") for l in lines), lines)
        with self.assertRaises(ValueError):
            gate.Limits(confirm=0)

    def test_streak_below_the_bound_but_above_the_worst_night_alarms_only_without_that_demand(self):
        history = level([100] * 12)
        history[3] = 85.0  # one low night long ago
        limits = gate.Limits(k=3, confirm=2, alpha=1e-12, matrix="m.toml")
        self.assertEqual(gate_lines(nights(history + [92, 91]), limits)[1], 0)  # not below 85
        loose = gate.Limits(k=3, confirm=2, alpha=1e-12, matrix="m.toml", beyond_worst=False)
        lines, n = gate_lines(nights(history + [92, 91]), loose)
        self.assertGreaterEqual(n, 1, lines)
        self.assertEqual(gate_lines(nights(history + [92, 100]), loose)[1], 0)  # the streak still needs 2

    def test_sustained_loss_above_the_worst_night_alarms_on_its_third_night(self):
        history = level([100] * 12)
        history[3] = 85.0  # one low night long ago hides a 5-9% loss from the one-bad-night rule
        limits = gate.Limits(k=3, confirm=2, alpha=1e-12, matrix="m.toml")  # streak 3, streak_k 4: the defaults
        self.assertEqual(gate_lines(nights(history + [92, 91]), limits)[1], 0)
        lines, n = gate_lines(nights(history + [92, 91, 93]), limits)
        self.assertGreaterEqual(n, 1, lines)
        self.assertTrue(any(l.startswith("REGRESSION ddp-2x1 throughput_img_s: the last 3 nights 92.00, 91.00, 93.00")
                            and l.endswith("(3 nights in a row: a sustained loss)") for l in lines), lines)
        self.assertEqual(gate_lines(nights(history + [92, 100, 93]), limits)[1], 0)  # broken by a good night
        off = gate.Limits(k=3, confirm=2, alpha=1e-12, matrix="m.toml", streak=0)
        self.assertEqual(gate_lines(nights(history + [92, 91, 93]), off)[1], 0)
        for bad in ({"streak": 1}, {"streak": -1}, {"streak_k": 0}):
            with self.assertRaises(ValueError):
                gate.Limits(**bad)

    def test_old_change_no_longer_alarms(self):
        lines, n = gate_lines(nights(level([100] * 10 + [94] * 8), bad_from=10))
        self.assertEqual(n, 0, lines)

    def test_improvement_is_reported_not_counted(self):
        lines, n = gate_lines(nights(level([100] * 12 + [110] * 3)))
        self.assertEqual(n, 0, lines)
        self.assertTrue(any(l.startswith("improved ddp-2x1 throughput_img_s: change point +") for l in lines), lines)

    def test_too_little_history_says_so_and_passes(self):
        lines, n = gate_lines(nights([100, 101, 99, 60]))
        self.assertEqual(n, 0)
        self.assertIn("not enough history ddp-2x1: 3 earlier nights of this workload, the change-point and noise "
                      "rules need 5 (--min-history)", lines)

    def test_the_default_wants_two_bad_nights_in_a_row(self):
        one = nights(level([100] * 12 + [90]))
        past = [r for r in one[:-1]]
        self.assertEqual(gate.check([one[-1]], past, [], gate.Limits(matrix="m.toml", streak=0, alpha=1e-12))[1], 0)
        two = nights(level([100] * 12 + [90, 90]))
        lines, n = gate.check([two[-1]], two[:-1], [], gate.Limits(matrix="m.toml", streak=0, alpha=1e-12))
        self.assertEqual(n, 2, lines)  # throughput and step time, on the second night

    def test_old_fixed_rule_misses_ten_percent(self):
        history = nights(level([100] * 12 + [90]))
        self.assertEqual(gate_lines(history, gate.Limits(rule="fixed"))[1], 0)
        self.assertEqual(gate_lines(history)[1], 2)

    def test_another_workload_of_the_entry_is_named_not_mixed(self):
        history = nights(level([100] * 8))
        history[3:3] = [row("w1", 30, width="8"), row("w2", 31, width="8")]
        lines, n = gate_lines(history)
        self.assertEqual(n, 0, lines)
        self.assertIn("note     ddp-2x1: earlier rows of this entry with another workload (width=8) are not mixed in",
                      lines)


class ReferenceTest(unittest.TestCase):
    """Nights run beside a reference build: the ratio is gated, the machine's drift is not."""

    def with_ref(self, tputs, refs):
        return [dict(r, reference_throughput_img_s=f"{ref:.2f}") for r, ref in zip(nights(tputs), refs)]

    def test_machine_slowdown_moving_both_builds_is_said_not_counted(self):
        steady = level([100] * 10)
        history = self.with_ref(steady + [70, 70, 70], steady + [70, 70, 70])
        lines, n = gate_lines(history)
        self.assertEqual(n, 0, lines)
        self.assertTrue(any(l.startswith("machine  ddp-2x1 throughput_img_s:") and "(not counted: the reference "
                            "build ran beside it" in l for l in lines), lines)

    def test_tonights_build_slower_than_the_reference_is_a_regression(self):
        refs = level([100] * 13)
        history = self.with_ref([r * (0.95 if i >= 10 else 1.0) for i, r in enumerate(refs)], refs)
        lines, n = gate_lines(history)
        self.assertEqual(n, 1, lines)
        self.assertTrue(any(l.startswith("REGRESSION ddp-2x1 throughput_vs_reference: change point -5.0%")
                            for l in lines), lines)

    def test_reference_rows_are_attached_by_entry_and_kept_out_of_the_history(self):
        with tempfile.TemporaryDirectory() as d:
            header = "run_id,timestamp,entry,gpus,throughput_img_s\n"
            put(d, "n1.csv", header + "n1,t1,a,2,90\nn1,t1,b,2,50\n")
            put(d, "n1.reference.csv", header + "n1,t1,a,2,100\nn1,t1,a,2,98\nn1,t1,a,2,120\n")
            got = R.load_history(d, [{"run_id": "tonight", "timestamp": "t9"}])
            self.assertEqual([(r["entry"], r.get("reference_throughput_img_s")) for r in got],
                             [("a", "100.0"), ("b", None)])


class HistoryPageTest(unittest.TestCase):
    def test_change_points_table_names_the_nights_and_revisions(self):
        *past, tonight = nights(level([100] * 10 + [90] * 3), bad_from=10)
        title, header, body = history_page.section(history_page.entry_histories([tonight], past))
        self.assertEqual(header[-3:], ["last good night", "first bad night", "detail"])
        self.assertEqual(len(body), 1)
        self.assertEqual(body[0][:2] + body[0][5:7], ["ddp-2x1", "regression", "n09 (a1)", "n10 (b2)"])
        self.assertIn("a1..b2 (not in this checkout)", body[0][7])

    def test_with_a_reference_the_history_is_the_ratio_and_launches_count_once(self):
        refs = level([100] * 13)
        rows = [dict(r, reference_throughput_img_s=f"{ref:.2f}")
                for r, ref in zip(nights([r * (0.9 if i >= 10 else 1.0) for i, r in enumerate(refs)], bad_from=10), refs)]
        *past, tonight = rows
        histories = history_page.entry_histories([tonight, dict(tonight), dict(tonight)], past)  # 3 launches
        self.assertEqual([h[0] for h in histories], ["ddp-2x1 (over the reference build)"])
        body = history_page.section(histories)[2]
        self.assertEqual(body[0][:3], ["ddp-2x1 (over the reference build)", "regression", "-10.0%"])
        self.assertRegex(body[0][3], r"^1\.0\d\d -> 0\.9\d\d$")

    def test_no_change_says_so(self):
        *past, tonight = nights(level([100] * 8))
        body = history_page.section(history_page.entry_histories([tonight], past))[2]
        self.assertEqual(body[0][-1], "no change point in up to 8 nights")


class HistoryFilesTest(unittest.TestCase):
    def test_corrupt_and_truncated_rows_are_named_and_skipped(self):
        with tempfile.TemporaryDirectory() as d:
            header = "run_id,timestamp,entry,gpus,throughput_img_s\n"
            put(d, "n1.csv", header + "n1,t1,a,2,100\nn1,t1,b,two,100\nn1,t1,c,2,fast\nn1,t1,d,2,99\nn1,t1,e")
            put(d, "other.csv", "x,y\n1,2\n")
            skipped = []
            got = R.load_history(d, [{"run_id": "tonight", "timestamp": "t9"}], skipped)
            self.assertEqual([r["entry"] for r in got], ["a", "d"])
            path = os.path.join(d, "n1.csv")
            self.assertEqual(skipped, [f"{path}:3: gpus='two': not a whole number >= 1",
                                       f"{path}:4: throughput_img_s='fast': not a number",
                                       f"{path}:6: the cells of this line do not match the header's 5 columns"])


if __name__ == "__main__":
    unittest.main()
