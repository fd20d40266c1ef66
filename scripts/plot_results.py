#!/usr/bin/env python3
"""Figures from ddpbench result rows (throughput, memory, scaling, and history
with --history DIR of earlier nights); the drawing is scripts/ddpbench_py/figures.py.

    scripts/plot_results.py results/*.csv --out plots/out/cpu [--history results/nightly]
"""
import argparse
import sys

from ddpbench_py import figures
from ddpbench_py import rows as R


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("files", nargs="+")
    p.add_argument("--out", required=True, help="output path prefix")
    p.add_argument("--history", help="directory of earlier nights' CSVs")
    args = p.parse_args()
    try:
        rows = R.load(args.files)
        if not rows:
            raise R.RowsError("no rows in " + ", ".join(args.files))
    except R.RowsError as e:
        sys.exit(f"plot: {e}")
    history = R.load_history(args.history, rows) if args.history else []
    print(*figures.night_figures(rows, history, args.out))


if __name__ == "__main__":
    main()
