#!/usr/bin/env python3
"""Compares strategies on one workload in one command: runs each strategy in
interleaved rounds (round 1: every strategy once, then round 2 ...), so that a
slow minute on a shared machine hits every strategy alike; appends every row
to one CSV; prints the strategy table (seed 003's shape) with each strategy's
median and spread over the rounds; writes the figures and the HTML page.

    scripts/compare.py --gpus=2 --strategies=all -- --device=cpu --small-input --width=16 --image-size=32
    scripts/compare.py --gpus=2 --strategies=single,ddp,pmp --rounds=5 --out=results/x.csv -- --steps=20

`all` is every strategy this build registers (ddpbench --list); `single` runs
on one device (the others' scaling efficiency is measured against it), the
rest on --gpus. An entry may carry flags of its own after `+`, each written
without its dashes and with `:` for `=`, so that one comparison holds the
one-dimensional strategies and the hybrids (the entry's label is the whole
spelling):

    scripts/compare.py --gpus=4 --strategies=zero3,zero3+replicate-degree:2,pmp+stage-ranks,pmp+stage-ranks+replicate-degree:2 -- --device=cpu --oversubscribe The flags after `--` go to every run. Reports go beside --out,
named by the comparison's run id: <id>.md, <id>.html, <id>_*.png, <id>/ (one
log per run) and <id>.failures.csv when a run failed. Entries, logs and
failures are run as the nightly job runs them (scripts/ddpbench_py/entries.py), and the
tables and figures are written by scripts/report.py.
"""
import argparse
import datetime
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
VENV = os.path.join(HERE, "..", ".venv")
try:
    import matplotlib  # noqa: F401  (the figures)
except ImportError:
    if os.path.exists(VENV) and os.path.realpath(sys.prefix) != os.path.realpath(VENV):
        py = os.path.join(VENV, "bin", "python")
        os.execv(py, [py, *sys.argv])  # run as `scripts/compare.py` from any python3
import report  # noqa: E402  (scripts/report.py, beside this one)
from ddpbench_py import entries  # noqa: E402
from ddpbench_py import rows as R  # noqa: E402

OWN_FLAGS = ("--strategy", "--gpus", "--out", "--run-id", "--entry", "--progress")


def registered(binary):
    """The strategies this build registers (first word of each --list line)."""
    try:
        out = subprocess.run([binary, "--list"], stdout=subprocess.PIPE, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError) as e:
        sys.exit(f"compare: cannot run {binary} --list: {e}")
    lines = [line.split()[0] for line in out.splitlines() if line.strip()]
    return lines[1:] if lines and lines[0] == "strategy" else lines  # under the header line


def split_entry(spec):
    """'pmp+stage-ranks+replicate-degree:2' -> ('pmp', ['--stage-ranks', '--replicate-degree=2'])."""
    name, *own = spec.split("+")
    return name, ["--" + f.replace(":", "=", 1) if f else "" for f in own]


def parse_args(argv):
    if "--" in argv:
        cut = argv.index("--")
        argv, flags = argv[:cut], argv[cut + 1:]
    else:
        flags = []
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--gpus", type=int, default=2, help="devices of every strategy but single (default 2)")
    p.add_argument("--strategies", default="all", help="all, or a comma-separated list")
    p.add_argument("--rounds", type=int, default=3, help="interleaved rounds (default 3)")
    p.add_argument("--out", default="results/compare.csv", help="CSV the rows are appended to")
    p.add_argument("--bin", default="build/ddpbench")
    p.add_argument("--timeout-s", type=int, default=7200, help="seconds before one run is stopped")
    args = p.parse_args(argv)
    if args.gpus < 1:
        p.error(f"--gpus={args.gpus}: must be 1 or more")
    if args.rounds < 1:
        p.error(f"--rounds={args.rounds}: must be 1 or more")
    for f in flags:
        if f.split("=", 1)[0] in OWN_FLAGS:
            p.error(f"{f}: compare.py sets {', '.join(OWN_FLAGS)} itself; give --gpus/--out before --")
    known = registered(args.bin)
    wanted = known if args.strategies == "all" else args.strategies.split(",")
    bad = [s for s in wanted if split_entry(s)[0] not in known]
    if bad:
        p.error(f"--strategies={args.strategies}: {', '.join(bad)} not registered; accepted: all or "
                f"a list of {', '.join(known)}")
    for s in wanted:
        if not all(split_entry(s)[1]):
            p.error(f"--strategies: '{s}': an entry's own flags follow '+', e.g. pmp+stage-ranks+replicate-degree:2")
    args.strategies = sorted(wanted, key=lambda s: s != "single")  # single first: the baseline
    args.flags = flags
    return args


def run_rounds(args, run_id, prefix):
    """Every strategy once per round, the order rotated each round (single
    first in round 1) -> number of failed runs."""
    os.makedirs(prefix, exist_ok=True)
    failed = 0
    for k in range(args.rounds):
        order = args.strategies[k % len(args.strategies):] + args.strategies[:k % len(args.strategies)]
        for s in order:
            strategy, own = split_entry(s)
            gpus = 1 if strategy == "single" else args.gpus
            entry = {"name": s, "strategy": strategy, "gpus": gpus}
            argv = [args.bin, f"--gpus={gpus}",
                    *entries.ddpbench_args(strategy, [*own, *args.flags], args.out, run_id, s)]
            rc, reason = entries.run_logged(argv, os.path.join(prefix, f"{s}-r{k + 1}.log"), args.timeout_s)
            print(f"round {k + 1}/{args.rounds} {s}: " + ("ok" if rc == 0 else f"FAILED (exit {rc}): {reason}"),
                  flush=True)
            if rc != 0:
                failed += 1
                entries.record_failure(prefix + ".failures.csv", run_id, entry, rc, reason, argv)
    return failed


def main():
    args = parse_args(sys.argv[1:])
    run_id = "compare-" + datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    prefix = os.path.join(os.path.dirname(os.path.abspath(args.out)), run_id)
    failed = run_rounds(args, run_id, prefix)
    rows = [r for r in R.load([args.out]) if r.get("run_id") == run_id] if os.path.exists(args.out) else []
    if not rows:
        sys.exit(f"compare: no run wrote a row (see {prefix}/*.log)")
    failures = R.load_failures(prefix + ".csv")
    summary = report.rounds_summary(rows)
    tables = [(f"Strategies: median of {args.rounds} interleaved round{'s' if args.rounds > 1 else ''}",
               *report.strategy_table(summary, report.ROUNDS_COLUMNS)),
              ("Every run", *report.strategy_table(rows))]
    if failures:
        tables.append(("Failed runs", *report.failure_table(failures)))
    report.write_reports(summary, failures, f"ddpbench compare {run_id}", tables, prefix + ".md",
                         prefix + ".html", prefix)
    print()
    print(report.markdown_table(*tables[0][1:]))
    print(f"\nrows in {args.out} (run_id {run_id}); report {prefix}.html, {prefix}.md, figures {prefix}_*.png")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
