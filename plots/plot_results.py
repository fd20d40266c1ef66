#!/usr/bin/env python3
"""Figures from ddpbench result rows (throughput, memory, scaling, and history
with --history DIR of earlier nights); the drawing is scripts/ddpbench_py/figures.py.

    plots/plot_results.py results/*.csv --out plots/out/cpu [--history results/nightly]
"""
import argparse
import os
import sys

# plots/ is not scripts/: the one command outside scripts/ that needs the
# shared package names its folder (scripts/ddpbench_py/__init__.py).
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "scripts"))
from ddpbench_py import figures  # noqa: E402
from ddpbench_py import rows as R  # noqa: E402


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
