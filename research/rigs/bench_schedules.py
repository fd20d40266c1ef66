#!/usr/bin/env python3
"""Benchmarks every pipeline schedule ddpbench and torch.distributed.pipelining
both have, side by side on CPU: ddpbench's pmp (2 logical CPU
devices of 1 thread in one process) against PyTorch's schedule class
(research/rigs/pipelining_torch.py: 2 ranks of 1 thread over Gloo), the same
ResNet-18 cut at the same unit boundaries, the same batch and micro-batches,
SGD. Not a test: it measures.

The cut: with --cuts=searched (the default), before the rounds ddpbench's own
shape search picks each schedule's split at block granularity (--units=blocks,
the boundaries PyTorch's side can cut at) in one short run, and both sides then
run that split in every round; a badly balanced cut would measure the cut, not
the schedule (at 64 px the layer3/layer4 blocks cost more than the early ones
on CPU, so 5,5 leaves stage 0 idle a quarter of the step). --cuts=fixed uses
the hand-picked splits in FIXED_CUTS instead.

Rounds are interleaved (bench_util.interleaved): each round runs every
(schedule, side) once. ddpbench's zero-bubble (ZB-H1, which PyTorch has no
class for) runs in the same rounds, for the issue's second goal: zbv's bubble
at most ZB-H1's. The table gives each schedule's median img/s on each side,
the ratio, and ddpbench's median measured bubble.

    .venv/bin/python research/rigs/bench_schedules.py --rounds=3 --out=results/cpu-2core/pipelines/cpu-2core-schedules-vs-torch.csv
"""
import argparse
import csv
import datetime
import os
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))  # research/rigs/ -> the repository
from bench_util import interleaved, machine, write_results  # noqa: E402

# schedule -> the --split of --cuts=fixed (PyTorch's chunks are cut at the same units)
FIXED_CUTS = {"gpipe": "5,5", "1f1b": "5,5", "interleaved": "3,2,2,3", "interleaved-zero-bubble": "3,2,2,3",
              "looped-bfs": "3,2,2,3", "zbv": "3,2,2,3", "dualpipev": "3,2,2,3", "zero-bubble": "5,5"}
SCHEDULES = [s for s in FIXED_CUTS if s != "zero-bubble"]
ONLY_DDPBENCH = ["zero-bubble"]


def parse_args():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--binary", default=os.path.join(ROOT, "build", "ddpbench"))
    p.add_argument("--schedules", default=",".join(SCHEDULES), help="comma-separated subset")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--chunks", type=int, default=8)
    p.add_argument("--image-size", type=int, default=64)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--cuts", default="searched", choices=("searched", "fixed"),
                   help="searched: ddpbench's shape search picks each schedule's split once, both sides use it")
    p.add_argument("--out", default=None, help="CSV of every run (appended); a .md table beside it")
    a = p.parse_args()
    a.schedules = a.schedules.split(",")
    bad = [s for s in a.schedules if s not in SCHEDULES]
    if bad:
        p.error(f"--schedules: {','.join(bad)} not accepted; accepted: {','.join(SCHEDULES)}")
    for flag, value in (("--rounds", a.rounds), ("--batch-size", a.batch_size), ("--chunks", a.chunks),
                        ("--steps", a.steps), ("--image-size", a.image_size)):
        if value < 1:
            p.error(f"{flag}={value} is not accepted; expected an integer >= 1")
    if not os.access(a.binary, os.X_OK):
        p.error(f"--binary={a.binary}: not an executable (build it with scripts/setup.sh ddpbench)")
    return a


def ddpbench_row(a, schedule, tmp, shape, steps, warmup):
    """One pmp run; shape is [--split=...] or the search's [--units=blocks]."""
    out = os.path.join(tmp, "r.csv")
    cmd = [a.binary, "--strategy=pmp", "--gpus=2", "--device=cpu", "--model=resnet18", "--optimizer=sgd",
           f"--image-size={a.image_size}", f"--batch-size={a.batch_size}", f"--chunks={a.chunks}",
           f"--schedule={schedule}", *shape, f"--steps={steps}", f"--warmup={warmup}",
           "--progress=off", f"--out={out}"]
    if schedule in ("interleaved", "interleaved-zero-bubble", "looped-bfs"):
        cmd.append("--virtual-stages=2")
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    with open(out) as f:
        return list(csv.DictReader(f))[-1], cmd


def run_ddpbench(a, schedule, split, tmp):
    row, cmd = ddpbench_row(a, schedule, tmp, [f"--split={split}"], a.steps, a.warmup)
    return float(row["throughput_img_s"]), float(row["bubble_measured"]), " ".join(cmd)


def choose_cuts(a, tmp):
    """schedule -> split: FIXED_CUTS, or what ddpbench's search picks at block granularity."""
    if a.cuts == "fixed":
        return dict(FIXED_CUTS)
    cuts = {}
    for schedule in a.schedules + ONLY_DDPBENCH:
        row, _ = ddpbench_row(a, schedule, tmp, ["--units=blocks"], 2, 1)
        cuts[schedule] = row["split"]
        print(f"{schedule:24s} cut {row['split']} (stage ms {row['stage_time_ms']})", flush=True)
    return cuts


def run_torch(a, schedule, split):
    cmd = [sys.executable, os.path.join(HERE, "pipelining_torch.py"), f"--schedule={schedule}", f"--split={split}",
           "--ranks=2", f"--batch-size={a.batch_size}", f"--chunks={a.chunks}", f"--image-size={a.image_size}",
           f"--steps={a.steps}", f"--warmup={a.warmup}"]
    text = subprocess.run(cmd, check=True, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True).stdout
    return float(text.split()[-2]), None, " ".join(cmd[1:])


def table(a, runs, stamp, cuts):
    lines = [f"Pipeline schedules: ddpbench pmp against torch.distributed.pipelining ({stamp})",
             f"machine: {machine()}",
             f"workload: ResNet-18 (torchvision's), {a.image_size} px synthetic, batch {a.batch_size} = {a.chunks} "
             f"micro-batches, SGD, 2 devices/ranks x 1 thread, {a.steps} timed steps after {a.warmup}, "
             f"{a.rounds} interleaved rounds",
             "cuts: " + ("each schedule's split picked once by ddpbench's shape search at block granularity "
                         "(--units=blocks), used by both sides" if a.cuts == "searched" else "fixed (FIXED_CUTS)"),
             f"command: {' '.join(sys.argv)}", "",
             "| schedule | split | ddpbench img/s (median, min-max) | PyTorch img/s (median, min-max) | ratio | "
             "ddpbench bubble (median) |", "|---|---|---|---|---|---|"]
    for schedule in a.schedules + ONLY_DDPBENCH:
        mine = [x for x in runs if x["schedule"] == schedule and x["side"] == "ddpbench"]
        theirs = [x["img_s"] for x in runs if x["schedule"] == schedule and x["side"] == "pytorch"]
        ours = [x["img_s"] for x in mine]
        cell = lambda v: f"{statistics.median(v):.1f} ({min(v):.1f}-{max(v):.1f})" if v else "-"  # noqa: E731
        ratio = f"{statistics.median(ours) / statistics.median(theirs):.2f}x" if ours and theirs else "-"
        bubble = f"{statistics.median(x['bubble'] for x in mine):.3f}" if mine else "-"
        lines.append(f"| {schedule} | {cuts[schedule]} | {cell(ours)} | {cell(theirs)} | {ratio} | {bubble} |")
    return lines + bubble_verdict(runs)


def bubble_verdict(runs):
    """The issue's second goal, from the same rounds: zbv's median measured bubble against ZB-H1's."""
    med = {s: statistics.median(x["bubble"] for x in runs if x["schedule"] == s and x["side"] == "ddpbench")
           for s in ("zbv", "zero-bubble") if any(x["schedule"] == s for x in runs)}
    if len(med) < 2:
        return []
    verdict = "at most" if med["zbv"] <= med["zero-bubble"] else "ABOVE"
    return ["", f"zbv's median measured bubble {med['zbv']:.3f} is {verdict} zero-bubble (ZB-H1)'s "
            f"{med['zero-bubble']:.3f}, same rounds."]


def main():
    a = parse_args()
    entries = [(s, side) for s in a.schedules for side in ("ddpbench", "pytorch")]
    entries += [(s, "ddpbench") for s in ONLY_DDPBENCH]
    with tempfile.TemporaryDirectory() as tmp:
        cuts = choose_cuts(a, tmp)

        def one(entry):
            schedule, side = entry
            split = cuts[schedule]
            result = run_ddpbench(a, schedule, split, tmp) if side == "ddpbench" else run_torch(a, schedule, split)
            print(f"{schedule:24s} {side:8s} {result[0]:7.1f} img/s", flush=True)
            return result

        runs = [{"round": r, "schedule": s, "side": side, "img_s": res[0], "bubble": res[1], "command": res[2]}
                for r, (s, side), res in interleaved(entries, a.rounds, one)]
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    lines = table(a, runs, stamp, cuts)
    print("\n".join(lines))
    if a.out:
        write_results(a.out, runs, stamp, lines)

if __name__ == "__main__":
    main()
