"""Tests of scripts/search.py (measure what `ddpbench --search` ranks first)
and of scripts/ddpbench_py/search_rank.py (how well the model ranked them):
Kendall's tau-b and the regret against hand-computed values, the join of the
ranked table with measured rounds, and the driver end to end against a fake
ddpbench that calibrates, ranks (a canned table) and appends one row per
measured run. These check the arithmetic and the plumbing, not the model."""
import contextlib
import csv
import io
import json
import os
import stat
import subprocess
import sys
import tempfile
import textwrap
import unittest
from unittest import mock

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPTS = os.path.join(HERE, "..", "..", "scripts")
# PYTHONPATH holds scripts/ and research/rigs/ (tests/CMakeLists.txt; by hand: docs/testing.md).
import search  # noqa: E402
from ddpbench_py import search_rank as S  # noqa: E402

# (rank, entry, strategy, flags, batch, predicted img/s, step ms, MB, fits, validated, error_pct)
RANKED = [("1", "ddp:b32:cap25", "ddp", "--strategy=ddp --gpus=2 --batch-size=32 --bucket-cap-mb=25", "32", "120.0",
           "533.3", "300.0", "1", "1", "8.0"),
          ("2", "ddp:b16:cap25", "ddp", "--strategy=ddp --gpus=2 --batch-size=16 --bucket-cap-mb=25", "16", "100.0",
           "320.0", "200.0", "1", "1", "8.0"),
          ("3", "pmp:b32:1f1b:m4", "pmp", "--strategy=pmp --gpus=2 --batch-size=32 --schedule=1f1b --chunks=4",
           "32", "80.0", "800.0", "150.0", "1", "0", ""),
          ("", "ddp:b64:cap25", "ddp", "--strategy=ddp --gpus=2 --batch-size=64 --bucket-cap-mb=25", "64", "130.0",
           "984.6", "900.0", "0", "1", "8.0")]
# Measured img/s per entry, one per round: ddp:b16 wins (median 110 against 100) though ranked second.
MEASURED = {"ddp:b32:cap25": [90.0, 110.0], "ddp:b16:cap25": [105.0, 115.0]}
WORKLOAD = ["--device=cpu", "--model=resnet18", "--batch-size=8", "--steps=6", "--warmup=2"]


def ranked_rows():
    return [dict(zip(S.RANKED_COLUMNS, [rank, entry, strategy, flags, batch, str(2 * int(batch)), img_s, step, mb, fits,
                                        val, err, "compute", ""]))
            for rank, entry, strategy, flags, batch, img_s, step, mb, fits, val, err in RANKED]


def write_ranked(path):
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, S.RANKED_COLUMNS, lineterminator="\n")
        w.writeheader()
        w.writerows(ranked_rows())


FAKE = """
import csv, json, os, sys
args = dict(a[2:].split("=", 1) for a in sys.argv[1:] if a.startswith("--") and "=" in a)
with open(os.environ["FAKE_ARGV"], "a") as f:
    f.write(json.dumps(sys.argv[1:]) + "\\n")
if "calibrate" in args:
    with open(args["calibrate"], "w") as f:
        json.dump({"model": "resnet18", "machine": "fake"}, f)
    print("calibrated")
elif "search" in args:
    if os.environ.get("FAKE_SEARCH_ERROR"):
        sys.stderr.write(os.environ["FAKE_SEARCH_ERROR"] + "\\n")
        sys.exit(2)
    with open(os.environ["FAKE_RANKED"]) as src, open(args["search-csv"], "w") as dst:
        dst.write(src.read())
    print("ranked")
else:
    if args["entry"] in os.environ.get("FAKE_OOM", "").split(","):
        print("ddpbench: out of memory on cpu:0: more than the device's capacity (--cpu-device-memory-mb)")
        sys.exit(6)
    out, new = args["out"], not os.path.exists(args["out"])
    done = 0 if new else sum(1 for r in csv.DictReader(open(out)) if r["entry"] == args["entry"])
    tput = json.loads(os.environ["FAKE_TPUT"])[args["entry"]][done]
    with open(out, "a", newline="") as f:
        w = csv.writer(f)
        if new:
            w.writerow(["run_id", "entry", "strategy", "gpus", "throughput_img_s", "peak_mem_mb", "host"])
        w.writerow([args["run-id"], args["entry"], args["strategy"], args["gpus"], tput, 100 + done * 10, "box"])
"""


def measured_row(entry, tput, mem, run_id="r1"):
    return {"run_id": run_id, "entry": entry, "throughput_img_s": str(tput), "peak_mem_mb": str(mem)}


class KendallTau(unittest.TestCase):
    def test_perfect_and_reversed_order(self):
        self.assertEqual(S.kendall_tau([1, 2, 3, 4], [10, 20, 30, 40]), 1.0)
        self.assertEqual(S.kendall_tau([1, 2, 3, 4], [40, 30, 20, 10]), -1.0)

    def test_one_discordant_pair_of_six(self):
        # (3, 4) swapped: 5 concordant, 1 discordant -> (5 - 1) / 6
        self.assertAlmostEqual(S.kendall_tau([1, 2, 3, 4], [1, 2, 4, 3]), 4 / 6)
        self.assertEqual(round(S.kendall_tau([1, 2, 3, 4], [1, 2, 4, 3]), 3), 0.667)

    def test_ties_as_tau_b(self):
        # x = 1,2,2,3  y = 1,3,2,4: pairs 12 C, 13 C, 14 C, 23 tied in x only, 24 C, 34 C
        # -> nc 5, nd 0; untied in x 5, untied in y 6: 5 / sqrt(5 x 6)
        self.assertAlmostEqual(S.kendall_tau([1, 2, 2, 3], [1, 3, 2, 4]), 5 / 30 ** 0.5)
        # x = 1,1,2  y = 1,2,2: 12 tied in x, 13 C, 23 tied in y -> 1 / sqrt(2 x 2)
        self.assertAlmostEqual(S.kendall_tau([1, 1, 2], [1, 2, 2]), 0.5)

    def test_undefined(self):
        self.assertIsNone(S.kendall_tau([], []))
        self.assertIsNone(S.kendall_tau([5], [7]))
        self.assertIsNone(S.kendall_tau([1, 2, 3], [4, 4, 4]))
        self.assertIsNone(S.kendall_tau([2, 2], [1, 3]))


class Regret(unittest.TestCase):
    def test_fraction_of_the_best(self):
        self.assertAlmostEqual(S.regret({"a": 80.0, "b": 100.0, "c": 90.0}, "a"), 0.2)
        self.assertAlmostEqual(S.regret({"a": 80.0, "b": 100.0, "c": 90.0}, "c"), 0.1)
        self.assertEqual(S.regret({"a": 80.0, "b": 100.0}, "b"), 0.0)

    def test_unmeasured_pick(self):
        self.assertIsNone(S.regret({"a": 80.0}, "z"))
        self.assertIsNone(S.regret({}, "a"))


class Summarize(unittest.TestCase):
    def test_medians_over_three_rounds_error_tau_regret(self):
        measured = [measured_row("ddp:b32:cap25", t, m) for t, m in ((90, 310), (100, 300), (130, 290))]
        measured += [measured_row("ddp:b16:cap25", t, m) for t, m in ((125, 210), (110, 190), (115, 200))]
        measured += [measured_row("pmp:b32:1f1b:m4", t, m) for t, m in ((60, 150), (70, 160), (64, 155))]
        out = S.summarize(ranked_rows(), measured, [{"entry": "ddp:b64:cap25"}])
        rows = {r["entry"]: r for r in out["rows"]}
        self.assertEqual(list(rows), [r[1] for r in RANKED])  # the ranked table's order, every row kept
        self.assertEqual(rows["ddp:b32:cap25"]["measured_img_s"], 100)
        self.assertEqual(rows["ddp:b32:cap25"]["measured_peak_mem_mb"], 300)
        self.assertEqual(rows["ddp:b32:cap25"]["measured_runs"], 3)
        self.assertAlmostEqual(rows["ddp:b32:cap25"]["model_error_pct"], 20.0)  # 120 / 100 - 1
        self.assertEqual(rows["ddp:b16:cap25"]["measured_img_s"], 115)
        self.assertAlmostEqual(rows["ddp:b16:cap25"]["model_error_pct"], 100 * (100 / 115 - 1))
        self.assertEqual(rows["pmp:b32:1f1b:m4"]["measured_img_s"], 64)
        self.assertIsNone(rows["ddp:b64:cap25"]["measured_img_s"])
        self.assertEqual(rows["ddp:b64:cap25"]["failed_runs"], 1)
        self.assertEqual(out["n"], 3)
        self.assertEqual(out["first"], "ddp:b32:cap25")
        self.assertEqual(out["best"], "ddp:b16:cap25")
        # predicted 120, 100, 80 against 100, 115, 64: pairs (1,2) D, (1,3) C, (2,3) C -> 1/3
        self.assertAlmostEqual(out["tau"], 1 / 3)
        self.assertAlmostEqual(out["regret"], 15 / 115)

    def test_nothing_measured(self):
        out = S.summarize(ranked_rows(), [])
        self.assertEqual((out["n"], out["tau"], out["regret"], out["best"]), (0, None, None, None))
        self.assertEqual(out["first"], "ddp:b32:cap25")

    def test_not_a_search_file(self):
        with tempfile.NamedTemporaryFile("w", suffix=".csv") as f:
            f.write("strategy,throughput_img_s\nddp,1\n")
            f.flush()
            with self.assertRaises(S.SearchError) as e:
                S.load_ranked(f.name)
            self.assertIn("not a ddpbench search file", str(e.exception))


class Flags(unittest.TestCase):
    def args(self, *extra):
        return search.parse_args(["--bin=ddpbench", "--out=o.csv", *extra, "--", *WORKLOAD])

    def test_candidate_flags_win_and_no_duplicates(self):
        argv = search.run_argv(self.args("--memory-mb=400"), ranked_rows()[1], "run1")
        self.assertEqual(argv, ["ddpbench", "--strategy=ddp", "--gpus=2", "--batch-size=16", "--bucket-cap-mb=25",
                                "--device=cpu", "--model=resnet18", "--steps=6", "--warmup=2",
                                "--cpu-device-memory-mb=400", "--expected=off", "--out=o.csv", "--run-id=run1",
                                "--entry=ddp:b16:cap25", "--progress=off"])
        self.assertEqual(search.command(argv), "ddpbench --strategy=ddp --gpus=2 --batch-size=16 --bucket-cap-mb=25 "
                                               "--device=cpu --model=resnet18 --steps=6 --warmup=2 "
                                               "--cpu-device-memory-mb=400 --expected=off")

    def test_a_runs_own_expectation_only_when_asked(self):
        argv = search.run_argv(search.parse_args(["--bin=b", "--", "--expected=auto"]), ranked_rows()[1], "r")
        self.assertEqual([a for a in argv if a.startswith("--expected")], ["--expected=auto"])

    def test_spaced_values(self):
        self.assertEqual(search.without(["--batch-size", "8", "--small-input", "--steps=3"], {"--batch-size"}),
                         ["--small-input", "--steps=3"])
        self.assertEqual(search.flag_value(["--steps", "7", "--warmup=1"], "--steps"), "7")
        self.assertEqual(search.flag_value(["--small-input"], "--steps", "50"), "50")

    def test_estimate_uses_steps_and_warmup(self):
        row = ranked_rows()[1]  # 320 ms a step
        self.assertAlmostEqual(search.estimate_s(row, WORKLOAD), 0.32 * 8 + 5)
        self.assertAlmostEqual(search.estimate_s(row, ["--device=cpu"]), 0.32 * 55 + 5)  # ddpbench's 50 + 5

    def test_budget_stops_starting_runs(self):
        args = self.args("--rounds=3", "--budget-s=50")
        clock = iter([0, 0, 10, 100, 200]).__next__  # start, then before each run
        with tempfile.TemporaryDirectory() as tmp, contextlib.redirect_stdout(io.StringIO()) as out, \
                mock.patch.object(search.entries, "run_logged", return_value=(0, "")) as run:
            runs, failed, stopped = search.measure(args, ranked_rows()[:2], "run1", tmp, clock)
        self.assertEqual((runs, failed, stopped), (2, 0, True))
        self.assertEqual(run.call_count, 2)
        self.assertIn("budget: --budget-s=50 spent (100 s) after 2 of 6 runs", out.getvalue())


def run(*args, env=None):
    return subprocess.run([sys.executable, os.path.join(SCRIPTS, "search.py"), *args], stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True, env={**os.environ, **(env or {})}, timeout=120)


class SearchCommand(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.dir = self.tmp.name
        self.bin = os.path.join(self.dir, "ddpbench")
        with open(self.bin, "w") as f:
            f.write(f"#!{sys.executable}\n" + textwrap.dedent(FAKE))
        os.chmod(self.bin, os.stat(self.bin).st_mode | stat.S_IXUSR)
        self.ranked = os.path.join(self.dir, "canned.csv")
        write_ranked(self.ranked)
        self.argv_log = os.path.join(self.dir, "argv.jsonl")
        self.out = os.path.join(self.dir, "res", "search.csv")
        self.env = {"FAKE_ARGV": self.argv_log, "FAKE_RANKED": self.ranked, "FAKE_TPUT": json.dumps(MEASURED)}

    def tearDown(self):
        self.tmp.cleanup()

    def calls(self):
        with open(self.argv_log) as f:
            return [json.loads(line) for line in f]

    def search(self, *flags, env=None):
        return run(f"--bin={self.bin}", "--gpus=2", f"--out={self.out}", *flags, "--", *WORKLOAD,
                   env={**self.env, **(env or {})})

    def test_calibrate_rank_measure_top_two(self):
        r = self.search("--measure=2", "--rounds=2")
        self.assertEqual(r.returncode, 0, r.stderr + r.stdout)
        calls = self.calls()
        self.assertEqual(len(calls), 6)  # calibrate, search, 2 x 2 runs
        profile = calls[0][0].split("=", 1)[1]
        prefix = profile[:-len(".profile.json")]
        self.assertEqual(calls[0], [f"--calibrate={profile}", "--strategy=ddp", "--gpus=2", *WORKLOAD])
        self.assertEqual(calls[1], [f"--search={profile}", "--gpus=2", f"--search-csv={prefix}.ranked.csv",
                                    *WORKLOAD])
        entries = [next(a for a in c if a.startswith("--entry=")) for c in calls[2:]]
        self.assertEqual(entries, ["--entry=ddp:b32:cap25", "--entry=ddp:b16:cap25",  # round 2 rotated
                                   "--entry=ddp:b16:cap25", "--entry=ddp:b32:cap25"])
        for c in calls[2:]:
            self.assertEqual(len([a for a in c if a.startswith("--batch-size=")]), 1, c)  # the candidate's
            self.assertNotIn("--batch-size=8", c)
        self.assertIn("winner: ddp:b16:cap25 measured 110.00 img/s", r.stdout.splitlines())
        self.assertIn(f"command: {self.bin} --strategy=ddp --gpus=2 --batch-size=16 --bucket-cap-mb=25 "
                      "--device=cpu --model=resnet18 --steps=6 --warmup=2 --expected=off", r.stdout.splitlines())
        self.assertIn("ranking: Kendall tau -1.000 over 2 measured, regret 9.1% (model's first pick ddp:b32:cap25, "
                      "measured best ddp:b16:cap25)", r.stdout.splitlines())
        self.assertIn("| 3 | pmp:b32:1f1b:m4 | 80.0 | 150.0 |  |  |  | no |", r.stdout)  # next, unmeasured
        with open(self.out) as f:
            measured = list(csv.DictReader(f))
        self.assertEqual(len(measured), 4)
        with open(prefix + ".search.csv") as f:
            joined = {r["entry"]: r for r in csv.DictReader(f)}
        self.assertEqual(len(joined), 4)
        self.assertEqual(joined["ddp:b16:cap25"]["measured_img_s"], "110.00")
        self.assertEqual(joined["ddp:b16:cap25"]["measured_runs"], "2")
        self.assertEqual(joined["ddp:b32:cap25"]["model_error_pct"], "20.0")
        self.assertEqual(joined["pmp:b32:1f1b:m4"]["measured_img_s"], "")
        with open(prefix + ".search-summary.csv") as f:
            (summary,) = list(csv.DictReader(f))
        self.assertEqual((summary["kendall_tau"], summary["regret_pct"], summary["measured_best"]),
                         ("-1.000", "9.1", "ddp:b16:cap25"))
        with open(prefix + ".search.html") as f:
            page = f.read()
        for text in ("<td>ddp:b16:cap25</td>", "<td>pmp:b32:1f1b:m4</td>", "<td>NO</td>", "<td>110.00</td>"):
            self.assertIn(text, page)
        self.assertTrue(os.path.isfile(os.path.join(prefix, "ddp:b16:cap25-r2.log")))

    def test_given_profile_memory_and_a_run_that_does_not_fit(self):
        profile = os.path.join(self.dir, "p.json")
        with open(profile, "w") as f:
            f.write("{}")
        r = self.search(f"--profile={profile}", "--measure=2", "--rounds=1", "--memory-mb=250", "--space=ddp",
                        env={"FAKE_OOM": "ddp:b32:cap25"})
        self.assertEqual(r.returncode, 1, r.stderr + r.stdout)  # a measured run failed
        calls = self.calls()
        self.assertTrue(calls[0][0].startswith("--search="), calls[0])  # no calibration
        self.assertIn("--search-space=ddp", calls[0])
        for c in calls:
            self.assertIn("--cpu-device-memory-mb=250", c)
        self.assertIn("round 1/1 ddp:b32:cap25: FAILED (exit 6)", r.stdout)
        self.assertIn("FAILED (1 run)", r.stdout)
        self.assertIn("winner: ddp:b16:cap25 measured 105.00 img/s", r.stdout)
        self.assertIn("regret n/a", r.stdout)  # the model's first pick has no measurement
        (failures,) = [n for n in os.listdir(os.path.dirname(self.out)) if n.endswith(".failures.csv")]
        with open(os.path.join(os.path.dirname(self.out), failures)) as f:
            self.assertEqual([r["entry"] for r in csv.DictReader(f)], ["ddp:b32:cap25"])

    def test_ddpbench_refusal_passes_through(self):
        error = "ddpbench: error: --search-space=warp: not a space (ddp, pmp, all)"
        r = self.search("--space=warp", env={"FAKE_SEARCH_ERROR": error})
        self.assertEqual(r.returncode, 2)
        self.assertEqual(r.stderr, error + "\n")

    def test_budget_below_one_run(self):
        r = self.search("--budget-s=1")  # ddp:b32: 533.3 ms x 8 steps + 5 s = 9 s
        self.assertEqual(r.returncode, 2)
        self.assertEqual(len(r.stderr.splitlines()), 1, r.stderr)
        self.assertIn("--budget-s=1: below one run of ddp:b32:cap25, estimated 9 s", r.stderr)
        self.assertEqual(len(self.calls()), 2)  # calibrated and ranked, nothing measured

    def test_bad_inputs_are_one_line(self):
        for flags, text in ((["--measure=0"], "--measure=0"), (["--rounds=0"], "--rounds=0"),
                            (["--budget-s=0"], "--budget-s=0"), (["--budget-s=-5"], "--budget-s=-5"),
                            (["--gpus=0"], "--gpus=0"), (["--gpus=two"], "'two'"),
                            (["--measure=2", "--exhaustive"], "--exhaustive"),
                            (["--profile=/nonexistent/p.json"], "/nonexistent/p.json"),
                            (["--", "--out=x.csv"], "--out=x.csv"), (["--", "--search=p.json"], "--search=p.json"),
                            (["--", "--search-csv=x.csv"], "--search-csv=x.csv"),
                            (["--", "--calibrate=p.json"], "--calibrate=p.json"),
                            (["--", "--strategy=ddp"], "--strategy=ddp")):
            r = run(f"--bin={self.bin}", f"--out={self.out}", *flags, env=self.env)
            self.assertEqual(r.returncode, 2, flags)
            self.assertEqual(len(r.stderr.splitlines()), 1, r.stderr)
            self.assertIn(text, r.stderr)
            self.assertNotIn("Traceback", r.stderr)
        self.assertFalse(os.path.exists(self.argv_log))  # ddpbench never ran
        self.assertFalse(os.path.exists(os.path.dirname(self.out)))

    def test_help_names_every_flag(self):
        r = run("--help")
        self.assertEqual(r.returncode, 0)
        for flag in ("--gpus", "--bin", "--profile", "--space", "--measure", "--exhaustive", "--rounds", "--budget-s",
                     "--out", "--memory-mb"):
            self.assertIn(flag, r.stdout)


if __name__ == "__main__":
    unittest.main()
