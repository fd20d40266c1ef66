#!/usr/bin/env python3
"""Tests of research/rigs/bench_projection.py's parts that need neither root nor a
run: tc rates, the tbf burst, the prediction command and the reading of its
CSV (a stand-in binary writes it), and the goal's verdict."""
import contextlib
import io
import os
import stat
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.join(HERE, "..", "..")
# PYTHONPATH holds scripts/ and research/rigs/ (tests/CMakeLists.txt; by hand: docs/testing.md).
import bench_projection as B  # noqa: E402


def refused(test, argv, msg):
    """Asserts that parse_args(argv) exits (argparse's error); returns what it printed."""
    err = io.StringIO()
    with test.assertRaises(SystemExit, msg=msg), contextlib.redirect_stderr(err):
        B.parse_args(argv)
    return err.getvalue()


class Rates(unittest.TestCase):
    def test_tc_units_are_si_bits(self):
        self.assertEqual(B.parse_rate("2gbit"), 2e9)
        self.assertEqual(B.parse_rate("500mbit"), 5e8)
        self.assertEqual(B.parse_rate("100MBIT"), 1e8)
        self.assertEqual(B.parse_rate("1.5gbit"), 1.5e9)
        self.assertEqual(B.parse_rate("64kbit"), 64e3)

    def test_bad_rates_are_refused(self):
        for bad in ("", "fast", "100", "100mb", "0mbit", "-5mbit", "100 Mbit/s"):
            with self.assertRaises(ValueError, msg=bad):
                B.parse_rate(bad)

    def test_bandwidth_for_the_projection(self):
        self.assertEqual(B.bw_arg(2e9), "2Gbit/s")
        self.assertEqual(B.bw_arg(5e8), "500Mbit/s")
        self.assertEqual(B.bw_arg(1e8), "100Mbit/s")
        self.assertEqual(B.bw_arg(1910.4e6), "1910.4Mbit/s")

    def test_burst_is_a_timer_tick_of_the_rate_and_at_least_32_kib(self):
        self.assertEqual(B.burst_bytes(2e9, 250), 1_000_000)
        self.assertEqual(B.burst_bytes(5e8, 250), 250_000)
        self.assertEqual(B.burst_bytes(1e8, 250), 50_000)
        self.assertEqual(B.burst_bytes(1e7, 250), 32 * 1024)
        self.assertEqual(B.burst_bytes(2e9, 1000), 250_000)


FAKE = """#!/bin/sh
# Stands in for ddpbench --project: writes a table with a row per strategy and world;
# ddp's img/s is what the profile file holds (1600.5 without one). Counts its calls.
for a in "$@"; do case "$a" in --project-csv=*) out="${a#--project-csv=}";; --project=*) p="${a#--project=}";; esac; done
echo "$@" > "$out.args"
echo x >> "$(dirname "$0")/calls"
ddp=1600.5
[ -f "$p" ] && ddp=$(cat "$p")
cat > "$out" <<EOF
strategy,schedule,nodes,gpus_per_node,world,batch_per_device,global_batch,step_ms,compute_ms,exposed_comm_ms,bubble_ms,img_s
ddp,,2,1,2,32,64,40,30,10,0,$ddp
zero3,,2,1,2,32,64,50,30,20,0,1280.25
pmp,1f1b,2,1,2,32,32,20,15,3,2,1600.0
ddp,,1,1,1,32,32,30,30,0,0,
EOF
"""


class Prediction(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.bin = os.path.join(self.tmp.name, "ddpbench")
        with open(self.bin, "w") as f:
            f.write(FAKE)
        os.chmod(self.bin, os.stat(self.bin).st_mode | stat.S_IXUSR)
        self.a = B.parse_args(["--binary", self.bin, "--rates=", "--out", os.path.join(self.tmp.name, "o.csv")])

    def tearDown(self):
        self.tmp.cleanup()

    def test_shaped_link_is_two_nodes_of_one_device_at_the_rate(self):
        img, cmd = B.predict(self.a, "p.json", "500mbit", "zero3", 2, 5e8, self.tmp.name)
        self.assertEqual(img, 1280.25)
        self.assertIn("--project=p.json", cmd)
        self.assertIn("--strategies=zero3 --nodes=2 --gpus-per-node=1 --inter=measured,bw=500Mbit/s", cmd)

    def test_pmp_is_projected_with_its_schedule_and_micro_batches(self):
        img, cmd = B.predict(self.a, "p.json", "2gbit", "pmp-1f1b", 2, None, self.tmp.name)
        self.assertEqual(img, 1600.0)  # the row of pmp, the projection's name for pmp-1f1b
        self.assertIn(f"--strategies=pmp --schedule=1f1b --chunks={B.PMP_CHUNKS} --nodes=2", cmd)
        run = B.CONFIGS["pmp-zero-bubble"][0]
        self.assertEqual(run, ["--strategy=pmp", "--stage-ranks", "--schedule=zero-bubble", f"--chunks={B.PMP_CHUNKS}",
                               "--units=blocks"])
        self.assertEqual(B.CONFIGS["pmp-1f1b"][2], (2,))  # on loopback: two stages, never one rank

    def test_a_calibrated_link_is_its_profiles_own_measurement(self):
        img, cmd = B.predict(self.a, "p-100mbit.json", "100mbit", "zero1", 2, None, self.tmp.name)
        self.assertIn("--project=p-100mbit.json", cmd)
        self.assertTrue(cmd.endswith("--nodes=2 --gpus-per-node=1 --inter=measured"), cmd)

    def test_loopback_is_one_node(self):
        img, cmd = B.predict(self.a, "p.json", "loopback", "ddp", 2, None, self.tmp.name)
        self.assertEqual(img, 1600.5)
        self.assertIn("--nodes=1 --gpus-per-node=2 --intra=measured", cmd)

    def test_each_round_is_predicted_from_its_own_profile_and_the_median_kept(self):
        key = ("loopback", "ddp", 2)
        runs = []
        for rnd, (profile_img, measured) in enumerate(((900, 1000), (1000, 1100), (1300, 1200))):
            path = os.path.join(self.tmp.name, f"r{rnd}.json")
            with open(path, "w") as f:
                f.write(str(profile_img))
            runs.append({"round": rnd, "key": key, "profile": path, "img_s": measured, "wall_s": 1.0,
                         "comm_ms": None, "veth_mb_step": None, "drops": None, "command": "ddpbench"})
        B.predict_runs(self.a, runs, {}, self.tmp.name)
        self.assertEqual([x["predicted"] for x in runs], [900, 1000, 1300])
        self.assertIn(f"--project={runs[2]['profile']}", runs[2]["predict_command"])
        row = B.summarise(self.a, [key], runs, {}, B.Link("100ms"))[0]
        self.assertEqual(row["measured_img_s"], "1100.00")
        self.assertEqual(row["predicted_img_s"], "1000.00")  # the median of the rounds' predictions
        self.assertEqual(row["predicted_all"], "900.00;1000.00;1300.00")
        self.assertEqual(row["error_pct"], "-9.1")
        # Calibrated once, every round shares the profile: one projection for all of them.
        with open(os.path.join(self.tmp.name, "calls")) as f:
            before = len(f.readlines())
        for x in runs:
            x["profile"] = runs[0]["profile"]
        B.predict_runs(self.a, runs, {}, self.tmp.name)
        with open(os.path.join(self.tmp.name, "calls")) as f:
            self.assertEqual(len(f.readlines()), before + 1)
        self.assertEqual(B.summarise(self.a, [key], runs, {}, B.Link("100ms"))[0]["predicted_all"],
                         "900.00;900.00;900.00")

    def test_profiles_are_per_round_or_once_and_links_their_own(self):
        out = os.path.join(self.tmp.name, "v.csv")
        a = B.parse_args(["--binary", self.bin, "--rates=", "--out", out])
        self.assertEqual(a.calibrate_every, "round")
        p = B.Profiles(a, "2026-11-25T23:00:00Z", self.tmp.name)
        stem = os.path.join(self.tmp.name, "v-profiles-20261125T230000Z")
        self.assertEqual(p.path(0, "loopback"), os.path.join(stem, "r0.json"))
        self.assertEqual(p.path(2, "500mbit"), os.path.join(stem, "r2-500mbit.json"))
        a = B.parse_args(["--binary", self.bin, "--rates=", "--out", out, "--calibrate-every=once"])
        p = B.Profiles(a, "2026-11-25T23:00:00Z", self.tmp.name)
        stem = os.path.join(self.tmp.name, "v-profile-20261125T230000Z")
        self.assertEqual(p.path(2, "loopback"), stem + ".json")
        self.assertEqual(p.path(2, "500mbit"), stem + "-500mbit.json")
        a = B.parse_args(["--binary", self.bin, "--rates=", "--out", out, f"--profile={self.bin}",
                          "--predict-bw=nominal"])
        p = B.Profiles(a, "2026-11-25T23:00:00Z", self.tmp.name)
        self.assertEqual(p.path(1, "loopback"), self.bin)  # given: used in every round
        self.assertEqual(p.path(1, "100mbit"), self.bin)  # nominal: the loopback profile at the rate
        self.assertEqual(p.ensure(1, "loopback", None), self.bin)  # given: never calibrated

    def test_no_row_or_empty_img_s_is_no_prediction(self):
        self.assertIsNone(B.predict(self.a, "p.json", "loopback", "ddp", 1, None, self.tmp.name)[0])
        self.assertIsNone(B.predict(self.a, "p.json", "loopback", "zero1", 2, None, self.tmp.name)[0])


class Verdict(unittest.TestCase):
    def args(self, **kw):
        return type("A", (), {"strategies": ["ddp", "zero3"], "no_predict": False, **kw})()

    def test_met_only_when_median_and_max_are_within(self):
        rows = [{"strategy": "ddp", "error_pct": e} for e in ("5", "-8", "12")] + \
               [{"strategy": "zero3", "error_pct": e} for e in ("-3", "25")]
        text = "\n".join(B.goal_lines(self.args(), rows))
        self.assertIn("| ddp | 3 | 8.0 | 12.0 | met |", text)
        self.assertIn("| zero3 | 2 | 14.0 | 25.0 | not met |", text)
        self.assertIn("**not met**", text)

    def test_without_predictions_nothing_is_judged(self):
        text = "\n".join(B.goal_lines(self.args(no_predict=True), [{"strategy": "ddp", "error_pct": ""}]))
        self.assertIn("not evaluated (--no-predict)", text)


class Pool(unittest.TestCase):
    def write(self, tmp):
        import csv
        out = os.path.join(tmp, "v.csv")
        with open(out, "w", newline="") as f:
            w = csv.DictWriter(f, ["timestamp", "strategy", "error_pct"])
            w.writeheader()
            for stamp, errs in (("t1", ("4", "-12")), ("t2", ("6", "25")), ("t3", ("90",))):
                for e in errs:
                    w.writerow({"timestamp": stamp, "strategy": "zero3", "error_pct": e})
        return out

    def test_every_configuration_of_every_pooled_run_counts_once(self):
        with tempfile.TemporaryDirectory() as tmp:
            a = B.parse_args(["--pool=t1,t2", f"--out={self.write(tmp)}"])
            text = "\n".join(B.pooled(a))
        self.assertIn("t1, t2 (4 configurations)", text)
        self.assertIn("| zero3 | 4 | 9.0 | 25.0 | not met |", text)  # t3's 90% left out

    def test_a_run_not_in_the_file_is_named_with_those_that_are(self):
        with tempfile.TemporaryDirectory() as tmp:
            a = B.parse_args(["--pool=t1,t9", f"--out={self.write(tmp)}"])
            with self.assertRaisesRegex(ValueError, r"t9 not a run in .*its runs: t1, t2, t3"):
                B.pooled(a)

    def test_a_measuring_flag_beside_pool_is_refused_by_name(self):
        for bad in (["--rounds=5"], ["--strategies=ddp"], ["--no-predict"], ["--rates=100mbit"]):
            self.assertIn(bad[0], refused(self, ["--pool=t1", *bad], bad))
        self.assertEqual(B.parse_args(["--pool=t1", "--out=x.csv"]).pool, ["t1"])


FAKE_JSON = """#!/usr/bin/env python3
# Stands in for ddpbench --project: zero3 at 2 ranks projects 1000 + 1000 x the profile's comm_loaded_ms_per_call
# (its sharded_comm's, which prices zero3's calls, where it has one).
import json, sys
arg = dict(a[2:].split("=", 1) for a in sys.argv[1:] if "=" in a)
p = json.load(open(arg["project"]))
loaded = p.get("sharded_comm", p)["comm_loaded_ms_per_call"]
with open(arg["project-csv"], "w") as f:
    f.write("strategy,world,img_s\\nzero3,2,%.2f\\n" % (1000 + 1000 * loaded))
"""


class Repredict(unittest.TestCase):
    """--pool --repredict [--set]: stored runs predicted again from their own profiles."""

    def setUp(self):
        import csv
        import json
        self.tmp = tempfile.TemporaryDirectory()
        t = self.tmp.name
        self.bin = os.path.join(t, "ddpbench")
        with open(self.bin, "w") as f:
            f.write(FAKE_JSON)
        os.chmod(self.bin, os.stat(self.bin).st_mode | stat.S_IXUSR)
        rounds = os.path.join(t, "v-profiles-20261126T000000Z")
        os.makedirs(rounds)
        for rnd, loaded in enumerate((0.1, 0.3, 0.2)):
            with open(os.path.join(rounds, f"r{rnd}-2gbit.json"), "w") as f:
                json.dump({"comm_loaded_ms_per_call": 9, "step_overhead_ms": 1,
                           "sharded_comm": {"comm_loaded_ms_per_call": loaded}}, f)
        self.out = os.path.join(t, "v.csv")
        with open(self.out, "w", newline="") as f:
            w = csv.DictWriter(f, ["timestamp", "link", "strategy", "ranks", "rounds", "measured_img_s",
                                   "predicted_img_s", "error_pct", "predict_command"])
            w.writeheader()
            w.writerow({"timestamp": "t1", "link": "2gbit", "strategy": "zero3", "ranks": "2", "rounds": "3",
                        "measured_img_s": "1000", "predicted_img_s": "1300", "error_pct": "30.0",
                        "predict_command": f"ddpbench --project={rounds}/r2-2gbit.json --project-csv=/x.csv "
                                           "--strategies=zero3 --nodes=2 --gpus-per-node=1 --inter=measured"})

    def tearDown(self):
        self.tmp.cleanup()

    def pooled(self, *extra):
        return "\n".join(B.pooled(B.parse_args([f"--pool=t1", f"--out={self.out}", f"--binary={self.bin}", *extra])))

    def test_each_round_is_predicted_from_its_own_stored_profile(self):
        self.assertEqual(B.round_profile("r/v-profiles-X/r2-500mbit.json", 0), "r/v-profiles-X/r0-500mbit.json")
        self.assertEqual(B.round_profile("r/v-profiles-X/r2.json", 1), "r/v-profiles-X/r1.json")
        self.assertEqual(B.round_profile("r/v-profile-X-500mbit.json", 1), "r/v-profile-X-500mbit.json")
        text = self.pooled("--repredict")
        # rounds' 1100, 1300 and 1200: the median, against the measured 1000
        self.assertIn("as run 1300 (30.0%), now 1200.00 (20.0%)", text)
        self.assertIn("| zero3 | 1 | 20.0 | 20.0 | not met |", text)  # judged on the new figure

    def test_set_changes_the_field_in_every_rounds_profile(self):
        # and in its sharded_comm: zero3 would project 10000 from the top-level field left at 9
        text = self.pooled("--set=comm_loaded_ms_per_call=0.05")
        self.assertIn("with comm_loaded_ms_per_call=0.05", text)
        self.assertIn("now 1050.00 (5.0%)", text)
        self.assertIn("| zero3 | 1 | 5.0 | 5.0 | met |", text)
        with open(os.path.join(self.tmp.name, "v-profiles-20261126T000000Z", "r0-2gbit.json")) as f:
            self.assertIn("0.1", f.read())  # the stored profile is left as it was

    def test_bad_sets_and_a_repredict_without_runs_are_refused(self):
        pool = ["--pool=t1", f"--out={self.out}", f"--binary={self.bin}"]
        for bad, named in (("--set=alpha=1", "alpha is not a profile field"),
                           ("--set=comm_loaded_ms_per_call=-1", "-1 is not a number of ms >= 0"),
                           ("--set=comm_loaded_ms_per_call=fast", "fast is not a number"),
                           ("--set=comm_loaded_ms_per_call", "no value is not a number")):
            self.assertIn(named, refused(self, [*pool, bad], bad))
        self.assertIn("give them with --pool", refused(self, ["--repredict"], "--repredict alone"))
        self.assertIn("not an executable", refused(self, ["--pool=t1", "--repredict", "--binary=/nonexistent"], "bin"))
        self.assertIn("--binary=/bin/true", refused(self, ["--pool=t1", "--binary=/bin/true"], "--binary alone"))


class Results(unittest.TestCase):
    def test_a_new_column_rewrites_the_header_and_shifts_no_row(self):
        import csv
        import bench_util
        with tempfile.TemporaryDirectory() as tmp:
            out = os.path.join(tmp, "r.csv")
            bench_util.write_results(out, [{"a": "1", "b": "2"}], "t1", ["x"])
            bench_util.write_results(out, [{"a": "3", "new": "4", "b": "5"}], "t2", ["y"])
            with open(out, newline="") as f:
                rows = list(csv.DictReader(f))
            self.assertEqual([(r["timestamp"], r["a"], r["b"], r["new"]) for r in rows],
                             [("t1", "1", "2", ""), ("t2", "3", "5", "4")])
            with open(os.path.join(tmp, "r.md")) as f:
                self.assertEqual(f.read(), "y\n")


class Arguments(unittest.TestCase):
    def test_the_driver_owns_strategy_gpus_and_out(self):
        for bad in ("--strategy=ddp", "--gpus=2", "--out=x.csv"):
            refused(self, ["--binary", sys.executable, "--rates=", f"--workload=--steps=3 {bad}"], bad)

    def test_unknown_strategies_and_rates_are_refused(self):
        for bad in (["--strategies=pmp"], ["--strategies=mp"], ["--rates=fast"]):
            refused(self, ["--binary", sys.executable, *bad], bad)


if __name__ == "__main__":
    unittest.main()
