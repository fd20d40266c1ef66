#!/usr/bin/env python3
"""A pool of real nights for measuring the nightly gate's error rates
(research/rigs/gate_error_rates.py): the cpu-small matrix's ENTRIES run in
rounds, each round a few clean nights and one night per injected slowdown
(--inject=delay in every rank's forward phase, as a slower commit would slow
each rank, sized to PCT% of the entry's clean step time p50 from
CALIBRATE.csv, to 0.01 ms; --inject-ranks=0 slows rank 0 alone, which a
data-parallel entry partly absorbs in its waits), the order rotated from
round to round so that a busy minute on a shared machine falls on every
variant alike. Each pass is scripts/nightly.py --no-report with run id
<variant>-r<round>; the rows go to OUT_DIR/<variant>-r<round>.csv. With
--repeat=N every variant's matrix (clean ones too) gets `repeat = N`: each
night's figure is the median of N timed sections of the one run; with
--launches=L each entry runs as L processes a night (a row each); with
--reference-bin each beside a launch of that build (without the injection).

    research/rigs/gate_pool.py --calibrate=/tmp/try1.csv --out-dir=/tmp/pool --rounds=6 \\
        --entries=single-1x1,ddp-2x1,dp-2x1 --pcts=3,5,10 --clean-per-round=2
"""
import argparse
import csv
import json
import os
import subprocess
import sys
import tomllib

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))


def delays(calibrate, entries, pct):
    """{entry: ms, to 0.01} = pct% of each entry's step_ms_p50 in the calibration night."""
    steps = {r["entry"]: float(r["step_ms_p50"]) for r in csv.DictReader(open(calibrate))}
    return {e: max(0.01, round(steps[e] * pct / 100, 2)) for e in entries}


def matrix_with_delays(base, ms, path, repeat=None, every_rank=True):
    """The base matrix with each named entry's --inject flag added to its flags,
    and `repeat` in its defaults if given (written back as TOML: JSON's
    strings, numbers, booleans and lists are TOML's)."""
    with open(base, "rb") as f:
        matrix = tomllib.load(f)
    defaults = dict(matrix.get("defaults", {}), **({"repeat": repeat} if repeat else {}))
    lines = ["[defaults]", *(f"{k} = {json.dumps(v)}" for k, v in defaults.items())]
    for entry in matrix["run"]:
        if entry["name"] in ms:
            ranks = range(int(entry.get("gpus", 1))) if every_rank else [0]
            entry["flags"] = [*entry.get("flags", []),
                              *(f"--inject=delay:rank={r},phase=forward,ms={ms[entry['name']]}" for r in ranks)]
        lines += ["", "[[run]]", *(f"{k} = {json.dumps(v)}" for k, v in entry.items())]
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--calibrate", required=True)
    p.add_argument("--out-dir", required=True)
    p.add_argument("--rounds", type=int, default=6)
    p.add_argument("--entries", default="single-1x1,ddp-2x1,dp-2x1")
    p.add_argument("--pcts", default="3,5,10")
    p.add_argument("--clean-per-round", type=int, default=2)
    p.add_argument("--repeat", type=int, default=None, help="timed sections per run (the matrix's own if left out)")
    p.add_argument("--launches", type=int, default=1, help="processes per entry and night (scripts/nightly.py --launches)")
    p.add_argument("--reference-bin", help="a build run beside each launch (scripts/nightly.py --reference-bin)")
    p.add_argument("--inject-ranks", choices=["all", "0"], default="all", help="the ranks slowed (default: every rank)")
    p.add_argument("--bin", default=os.path.join(ROOT, "build/ddpbench"))
    p.add_argument("--matrix", default=os.path.join(ROOT, "scripts/matrix/cpu-small.toml"))
    args = p.parse_args()
    entries = args.entries.split(",")
    os.makedirs(args.out_dir, exist_ok=True)
    variants = {}
    clean = args.matrix
    if args.repeat:
        clean = os.path.join(args.out_dir, "clean.toml")
        matrix_with_delays(args.matrix, {}, clean, args.repeat)
    for i in range(args.clean_per_round):
        variants[f"clean{i}"] = clean
    for pct in args.pcts.split(","):
        ms = delays(args.calibrate, entries, float(pct))
        path = os.path.join(args.out_dir, f"d{pct}.toml")
        matrix_with_delays(args.matrix, ms, path, args.repeat, every_rank=args.inject_ranks == "all")
        variants[f"d{pct}"] = path
        print(f"d{pct}: " + ", ".join(f"{e} {m} ms" for e, m in ms.items()), flush=True)
    names = list(variants)
    for r in range(1, args.rounds + 1):
        k = (r - 1) % len(names)
        order = names[k:] + names[:k]
        for v in order:
            run_id = f"{v}-r{r}"
            cmd = [sys.executable, os.path.join(ROOT, "scripts/nightly.py"), f"--matrix={variants[v]}", f"--bin={args.bin}",
                   f"--out-dir={args.out_dir}", f"--run-id={run_id}", "--no-report", f"--launches={args.launches}", *[f"--only={e}" for e in entries],
                   *([f"--reference-bin={args.reference_bin}"] if args.reference_bin else [])]
            done = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            print(f"round {r} {v}: exit {done.returncode}", flush=True)


if __name__ == "__main__":
    main()
