#!/usr/bin/env python3
"""Tests of scripts/project.py (the what-if front to `ddpbench --project`) and
of scripts/report.py's projected section, against fake ddpbench binaries: one
that prints a table and writes a projection CSV in ddpbench's columns, one
that refuses its input as ddpbench does (exit 2, one `ddpbench: error:` line).
These check the plumbing (flags, exit codes, files), not any prediction."""
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

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPTS = os.path.join(HERE, "..", "..", "scripts")
# PYTHONPATH holds scripts/ and research/rigs/ (tests/CMakeLists.txt; by hand: docs/testing.md).
import project  # noqa: E402

# (strategy, schedule, nodes, world, img_s, efficiency, error_pct, extrapolated, max_batch)
POINTS = [("ddp", "", 1, 8, "760.0", "0.950", "8.0", "0", "300"),
          ("ddp", "", 2, 16, "1440.0", "0.900", "8.0", "0", "300"),
          ("ddp", "", 64, 512, "30720.0", "0.600", "8.0", "1", "300"),
          ("zero3", "", 1, 8, "640.0", "0.800", "", "0", "900"),
          ("zero3", "", 64, 512, "20480.0", "0.400", "", "1", "900"),
          ("pmp", "1f1b", 1, 8, "400.0", "0.500", "15.0", "0", "20"),
          ("pmp", "gpipe", 1, 8, "320.0", "0.400", "15.0", "0", "20")]


def projection_rows():
    rows = []
    for s, sched, nodes, world, img_s, eff, err, extr, max_batch in POINTS:
        rows.append(dict(zip(project.COLUMNS, [
            s, sched, str(nodes), "8", str(world), "32", str(32 * world), "40.00", "30.00", "6.00", "4.00", img_s,
            eff, "2048.0", max_batch, str(3 * int(max_batch)), err, extr, "compute", "nvlink4", "ib-ndr400" if nodes > 1 else "",
            "prof.json"])))
    return rows


def write_csv(path, rows):
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=project.COLUMNS, lineterminator="\n")
        w.writeheader()
        w.writerows(rows)


TABLE = ("profile prof.json: resnet18 width 64 at 224 px, batch 32, float32\n"
         "strat   schedule  img/s\nddp     -         760.0\n")
ERROR = "ddpbench: error: --inter=warp9: not a link preset (nvlink4, pcie4, ib-ndr400, ...) or measured"


def fake_binary(directory, name, body):
    path = os.path.join(directory, name)
    with open(path, "w") as f:
        f.write(f"#!{sys.executable}\n" + textwrap.dedent(body))
    os.chmod(path, os.stat(path).st_mode | stat.S_IXUSR)
    return path


GOOD = f"""
import json, os, shutil, sys
csv_path = next(a.split("=", 1)[1] for a in sys.argv if a.startswith("--project-csv="))
with open(os.path.join(os.path.dirname(csv_path), "argv.json"), "w") as f:
    json.dump(sys.argv[1:], f)
shutil.copyfile(os.environ["FAKE_CSV"], csv_path)
sys.stdout.write({TABLE!r})
"""
BAD = f"""
import sys
sys.stderr.write({ERROR!r} + "\\n")
sys.exit(2)
"""


def run(script, *args, env=None):
    return subprocess.run([sys.executable, os.path.join(SCRIPTS, script), *args], stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True, env={**os.environ, **(env or {})}, timeout=60)


class Tmp(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.dir = self.tmp.name
        self.profile = os.path.join(self.dir, "prof.json")
        with open(self.profile, "w") as f:
            json.dump({"model": "resnet18", "batch_size": 32, "precision": "float32", "device": "cpu",
                       "machine": "test box", "command": "ddpbench --calibrate=prof.json"}, f)
        self.fake_csv = os.path.join(self.dir, "fake.csv")
        write_csv(self.fake_csv, projection_rows())
        self.out = os.path.join(self.dir, "out")

    def tearDown(self):
        self.tmp.cleanup()


class ProjectCommand(Tmp):
    def test_table_csv_figure_and_page(self):
        good = fake_binary(self.dir, "good", GOOD)
        r = run("project.py", self.profile, f"--out={self.out}", f"--bin={good}", "--nodes=1,2,64",
                "--inter=100gbe", "--", "--schedule=1f1b", env={"FAKE_CSV": self.fake_csv})
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertTrue(r.stdout.startswith(TABLE), r.stdout)  # ddpbench's table, as it printed it
        with open(self.fake_csv) as a, open(os.path.join(self.out, "projection.csv")) as b:
            self.assertEqual(a.read(), b.read())
        with open(os.path.join(self.out, "argv.json")) as f:
            argv = json.load(f)
        self.assertEqual(argv, [f"--project={self.profile}", f"--project-csv={self.out}/projection.csv",
                                "--nodes=1,2,64", "--gpus-per-node=8", "--intra=nvlink4", "--inter=100gbe",
                                "--device-memory-gb=80", "--schedule=1f1b"])  # no --strategies: ddpbench's
        png = os.path.join(self.out, "projection.png")
        with open(png, "rb") as f:
            self.assertEqual(f.read(8), b"\x89PNG\r\n\x1a\n")
        self.assertGreater(os.path.getsize(png), 5000)
        with open(os.path.join(self.out, "projection.html")) as f:
            page = f.read()
        for text in ("<td>ddp</td>", "<td>zero3</td>", "<td>pmp</td>", "<td>1f1b</td>", "<td>gpipe</td>",
                     "<td>±8.0%</td>", "<td>not validated</td>",
                     '<img alt="projection.png" src="data:image/png;base64,',
                     "model=resnet18", "machine=test box", "not measured"):
            self.assertIn(text, page)

    def test_ddpbench_error_passes_through(self):
        bad = fake_binary(self.dir, "bad", BAD)
        r = run("project.py", self.profile, f"--out={self.out}", f"--bin={bad}", "--inter=warp9")
        self.assertEqual(r.returncode, 2)
        self.assertEqual(r.stderr, ERROR + "\n")
        self.assertFalse(os.path.exists(os.path.join(self.out, "projection.png")))

    def test_missing_profile_is_one_message(self):
        missing = os.path.join(self.dir, "nope.json")
        r = run("project.py", missing, f"--out={self.out}", "--bin=/nonexistent/ddpbench")
        self.assertEqual(r.returncode, 2)
        self.assertEqual(len(r.stderr.splitlines()), 1, r.stderr)
        self.assertIn(missing, r.stderr)
        self.assertFalse(os.path.exists(self.out))

    def test_missing_binary_and_bad_flags(self):
        r = run("project.py", self.profile, f"--out={self.out}", "--bin=/nonexistent/ddpbench")
        self.assertEqual(r.returncode, 2)
        self.assertIn("/nonexistent/ddpbench", r.stderr)
        for argv, text in ((["--nodes=1,0"], "--nodes"), (["--gpus-per-node=0"], "--gpus-per-node=0"),
                           (["--device-memory-gb=-1"], "--device-memory-gb"),
                           (["--strategies=ddp,,pmp"], "--strategies"),
                           (["--", "--project-csv=x.csv"], "--project-csv")):
            stderr = io.StringIO()
            with self.assertRaises(SystemExit) as e, contextlib.redirect_stderr(stderr):
                project.parse_args([self.profile, *argv])
            self.assertEqual(e.exception.code, 2, argv)
            self.assertIn(text, stderr.getvalue().splitlines()[-1])

    def test_help_names_every_flag(self):
        r = run("project.py", "--help")
        self.assertEqual(r.returncode, 0)
        for flag in ("--gpus-per-node", "--nodes", "--intra", "--inter", "--strategies", "--device-memory-gb",
                     "--batch-size", "--out", "--bin"):
            self.assertIn(flag, r.stdout)


class Tables(unittest.TestCase):
    def test_lines_per_strategy_and_schedule(self):
        lines = project.series(projection_rows())
        self.assertEqual(list(lines), ["ddp", "zero3", "pmp 1f1b", "pmp gpipe"])
        self.assertEqual([r["world"] for r in lines["ddp"]], ["8", "16", "512"])

    def test_single_device_from_the_efficiency(self):
        self.assertAlmostEqual(project.single_img_s(projection_rows()), 100.0)  # 760 / (0.95 x 8)

    def test_cells(self):
        header, body = project.table(projection_rows())
        cells = [dict(zip(header, b)) for b in body]
        self.assertEqual(cells[2]["nodes x GPUs/node"], "64 x 8")
        self.assertEqual(cells[2]["extrapolated"], "yes")
        self.assertEqual(cells[0]["extrapolated"], "")
        self.assertEqual(cells[0]["error"], "±8.0%")
        self.assertEqual(cells[3]["error"], "not validated")
        self.assertEqual(cells[0]["compute / exposed comm / bubble ms"], "30.00 / 6.00 / 4.00")
        self.assertEqual(cells[0]["memory/device MB"], "2048.0")
        self.assertEqual(cells[5]["memory/device MB"], "2048.0 (does not fit)")  # max batch 20 < 32

    def test_not_a_projection_file(self):
        with tempfile.NamedTemporaryFile("w", suffix=".csv") as f:
            f.write("strategy,throughput_img_s\nddp,1\n")
            f.flush()
            with self.assertRaises(project.ProjectionError) as e:
                project.load(f.name)
            self.assertIn("not a ddpbench projection file", str(e.exception))


class ReportSection(Tmp):
    def night(self):
        path = os.path.join(self.dir, "night.csv")
        header = ["run_id", "strategy", "gpus", "nodes", "model", "width", "per_device_batch", "throughput_img_s"]
        with open(path, "w", newline="") as f:
            w = csv.writer(f)
            w.writerow(header)
            w.writerow(["n1", "single", "1", "1", "resnet18", "4", "32", "100"])
            w.writerow(["n1", "ddp", "2", "1", "resnet18", "4", "32", "180"])
        return path

    def test_projected_section_only_with_the_flag(self):
        night = self.night()
        plain, projected = (os.path.join(self.dir, f"{n}.html") for n in ("plain", "projected"))
        r = run("report.py", night, f"--html={plain}", f"--markdown={plain}.md")
        self.assertEqual(r.returncode, 0, r.stderr)
        r = run("report.py", night, f"--html={projected}", f"--markdown={projected}.md",
                f"--projection={self.fake_csv}")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("### Projected, not measured: prof.json", r.stdout)
        with open(plain) as a, open(projected) as b:
            without, with_ = a.read(), b.read()
        self.assertNotIn("rojected", without)
        self.assertNotIn("projection.png", without)
        self.assertIn("<h2>Projected, not measured: prof.json (intra nvlink4, inter ib-ndr400, 8 GPUs/node)</h2>",
                      with_)
        self.assertIn("<td>gpipe</td>", with_)
        self.assertIn('src="data:image/png;base64,', with_[with_.index("Projected, not measured"):])
        self.assertTrue(with_.startswith(without[:without.index("</body>")]))  # the measured part unchanged
        with open(plain + ".md") as a, open(projected + ".md") as b:
            md_without, md_with = a.read(), b.read()
        self.assertNotIn("rojected", md_without)
        self.assertIn("| ddp |  | 64 x 8 |", md_with)
        self.assertNotIn("projection.png", md_with)  # no --figures: nothing beside the markdown to link

    def test_not_a_projection_file_is_refused(self):
        night = self.night()
        r = run("report.py", night, f"--projection={night}")
        self.assertEqual(r.returncode, 1)
        self.assertIn("not a ddpbench projection file", r.stderr)


if __name__ == "__main__":
    unittest.main()
