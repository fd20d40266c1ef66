#!/usr/bin/env python3
"""Two builds of ddpbench on the same workload, interleaved: each round runs
every strategy with both binaries, their order swapped every other round
(scripts/ddpbench_py/ab_rounds.py, the runner scripts/bisect_slow.py uses), so
that a slow minute on a shared machine hits both alike. Prints each strategy's
median throughput per build, new/old per round, the sharded strategies
against ddp and ddp's scaling efficiency (2 ranks against single) per build.
Every run's row goes to OUT.csv (each carries its command and git revision).

    research/rigs/build_ab.py OLD_BIN NEW_BIN OUT.csv ROUNDS [--strategies=single,ddp,zero1,zero2,zero3]

--common: the flags every run shares (default: CPU, 1 thread per device,
ResNet-18 at 64 px, batch 16 per device, 20 timed steps after 5).
"""
import argparse
import csv
import os
import shlex
import statistics
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts"))
from ddpbench_py import ab_rounds  # noqa: E402

COMMON = ("--device=cpu --threads-per-device=1 --model=resnet18 --image-size=64 --batch-size=16 --steps=20 "
          "--warmup=5 --no-eval --progress=off")


def command_for(strategy, common):
    def command(binary, out_csv, run_id):
        gpus = [] if strategy == "single" else ["--gpus=2"]
        return [binary, *shlex.split(common), f"--strategy={strategy}", *gpus, f"--run-id={run_id}",
                f"--entry={strategy}", f"--out={out_csv}"]
    return command


def collect(work_dir, out):
    """Appends every run's row (work_dir/*.csv) to out, one header."""
    rows = []
    for name in sorted(os.listdir(work_dir)):
        if name.endswith(".csv"):
            with open(os.path.join(work_dir, name), newline="") as f:
                rows += list(csv.DictReader(f))
    if not rows:
        return
    new = not os.path.exists(out) or os.path.getsize(out) == 0
    with open(out, "a", newline="") as f:
        w = csv.DictWriter(f, list(rows[0]), extrasaction="ignore")
        if new:
            w.writeheader()
        w.writerows(rows)


def summary(values, strategies):
    med = statistics.median
    for s in strategies:
        old, new = values[("old", s)], values[("new", s)]
        per = ab_rounds.ratio(values, ("new", s), ("old", s)).ratios
        if not per:
            print(f"{s:7s} no round in which both builds ran")
            continue
        print(f"{s:7s} old {med(old.values()):7.1f}  new {med(new.values()):7.1f} img/s  new/old median "
              f"{med(per):.3f} (rounds: {', '.join(f'{x:.3f}' for x in per)})")
    for b in ("old", "new"):
        parts = [f"{s}/ddp {ab_rounds.ratio(values, (b, s), (b, 'ddp')).median:.3f}"
                 for s in ("zero1", "zero2", "zero3") if s in strategies and "ddp" in strategies
                 and ab_rounds.ratio(values, (b, s), (b, "ddp")).ratios]
        if "single" in strategies and "ddp" in strategies:
            scaling = ab_rounds.ratio(values, (b, "ddp"), (b, "single")).ratios
            if scaling:
                parts.append(f"ddp scaling {med(scaling) / 2:.3f}")
        print(f"{b}: " + ", ".join(parts))


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("old_bin")
    p.add_argument("new_bin")
    p.add_argument("out")
    p.add_argument("rounds", type=int)
    p.add_argument("--strategies", default="single,ddp,zero1,zero2,zero3")
    p.add_argument("--common", default=COMMON)
    args = p.parse_args()
    if args.rounds < 1:
        p.error(f"ROUNDS={args.rounds}: want a whole number >= 1")
    for b in (args.old_bin, args.new_bin):
        if not os.access(b, os.X_OK):
            p.error(f"{b}: not an executable ddpbench binary")
    strategies = args.strategies.split(",")
    commands = {s: command_for(s, args.common) for s in strategies}
    with tempfile.TemporaryDirectory() as work:
        values = ab_rounds.run_rounds([("old", args.old_bin), ("new", args.new_bin)], commands, args.rounds, work)
        collect(work, args.out)
    summary(values, strategies)


if __name__ == "__main__":
    main()
