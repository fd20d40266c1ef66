#!/usr/bin/env python3
"""Two builds' collective micro-benchmarks in interleaved rounds.

Runs tests/bench's Google Benchmark binary of build OLD and of build NEW one
after the other, ROUNDS times, the order swapped every other round (old new,
new old, old new, ...: a drift of the machine over the rounds then falls on
both builds alike, as scripts/ddpbench_py/ab_rounds.py does), each writing its JSON
into OUT, and prints the median bus bandwidth of each benchmark per build with
the ratio new/old and, per build, shared memory's ratio to Gloo at each size.

    research/rigs/collectives_ab.py OLD_GBENCH NEW_GBENCH OUT [--rounds=3]
        [--filter='(Gloo|Shm)_(allreduce|reduce_scatter)/(1048576|16777216|67108864)/']
"""
import argparse
import collections
import json
import pathlib
import statistics
import subprocess
import sys


def run_rounds(builds, out, rounds, pattern, min_time):
    for r in range(1, rounds + 1):
        order = list(builds.items())
        for name, binary in order if r % 2 else reversed(order):
            target = out / f"{name}-r{r}.json"
            subprocess.run([binary, f"--benchmark_filter={pattern}", f"--benchmark_min_time={min_time}",
                            f"--benchmark_out={target}", "--benchmark_out_format=json"],
                           check=True, stdout=subprocess.DEVNULL)


def busbw(out):
    """{(benchmark, build): [GB/s per round]}"""
    figures = collections.defaultdict(list)
    for path in sorted(out.glob("*-r*.json")):
        build = path.stem.rsplit("-r", 1)[0]
        for b in json.loads(path.read_text())["benchmarks"]:
            figures[(b["name"].replace("/real_time", ""), build)].append(b["busbw"] / 1e9)
    return figures


def report(figures, builds):
    med = {k: statistics.median(v) for k, v in figures.items()}
    names = sorted({k[0] for k in figures})
    print("| benchmark | " + " | ".join(f"{b} busbw GB/s" for b in builds) + " | new/old |")
    print("|---|" + "---|" * (len(builds) + 1))
    for n in names:
        cells = [f"{med[(n, b)]:.2f}" for b in builds]
        print(f"| {n} | " + " | ".join(cells) + f" | {med[(n, 'new')] / med[(n, 'old')]:.2f}x |")
    print("\nshared memory / Gloo, per build:")
    for n in names:
        if not n.startswith("BM_Shm_"):
            continue
        gloo = n.replace("BM_Shm_", "BM_Gloo_")
        if all((gloo, b) in med for b in builds):
            print(f"  {n}: " + ", ".join(f"{b} {med[(n, b)] / med[(gloo, b)]:.2f}x" for b in builds))


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("old")
    p.add_argument("new")
    p.add_argument("out", type=pathlib.Path)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--filter", default="(Gloo|Shm)_(allreduce|reduce_scatter)/(1048576|16777216|67108864)/")
    p.add_argument("--min-time", default="0.3")
    p.add_argument("--report-only", action="store_true", help="summarise OUT's JSON without running")
    a = p.parse_args()
    builds = {"old": a.old, "new": a.new}
    if a.rounds < 1:
        sys.exit(f"collectives_ab: --rounds={a.rounds}: accepted: an integer >= 1")
    a.out.mkdir(parents=True, exist_ok=True)
    if not a.report_only:
        run_rounds(builds, a.out, a.rounds, a.filter, a.min_time)
    report(busbw(a.out), list(builds))


if __name__ == "__main__":
    main()
