#!/usr/bin/env python3
"""Figures from ddpbench result rows: throughput per strategy and devices, and
peak memory per device (stacked per device, as the documents report
"5.9GB / 3.4GB"). Needs matplotlib (installed into .venv by scripts/setup.sh).

    plots/plot_results.py results/*.csv --out plots/out/cpu
      -> plots/out/cpu_throughput.png, plots/out/cpu_memory.png
"""
import argparse
import csv
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def load(paths):
    rows = []
    for path in paths:
        with open(path, newline="") as f:
            reader = csv.DictReader(f)
            if not reader.fieldnames or "throughput_img_s" not in reader.fieldnames:
                sys.exit(f"plot: {path}: not a ddpbench results file")
            rows.extend(reader)
    if not rows:
        sys.exit("plot: no rows")
    return rows


def label(row):
    extra = row.get("schedule") if row.get("strategy") == "pmp" else ""
    return f"{row['strategy']}{'-' + extra if extra else ''}\n{row['gpus']} dev, b={row['per_device_batch']}"


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("files", nargs="+")
    p.add_argument("--out", required=True, help="output path prefix")
    args = p.parse_args()
    rows = load(args.files)
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    labels = [label(r) for r in rows]
    where = f"{rows[0].get('device_name') or rows[0].get('device')} ({rows[0].get('host')})"

    fig, ax = plt.subplots(figsize=(max(6, 1.1 * len(rows)), 4))
    ax.bar(range(len(rows)), [float(r["throughput_img_s"]) for r in rows], color="#4477aa")
    for i, r in enumerate(rows):
        if r.get("scaling_efficiency"):
            ax.annotate(f"eff {float(r['scaling_efficiency']):.2f}", (i, float(r["throughput_img_s"])),
                        ha="center", va="bottom", fontsize=8)
    ax.set_xticks(range(len(rows)), labels, fontsize=8)
    ax.set_ylabel("images / s")
    ax.set_title(f"Training throughput, {rows[0]['model']} on {where}", fontsize=9)
    fig.tight_layout()
    fig.savefig(args.out + "_throughput.png", dpi=120)

    fig, ax = plt.subplots(figsize=(max(6, 1.1 * len(rows)), 4))
    for i, r in enumerate(rows):
        bottom = 0.0
        for d, mb in enumerate(float(x) for x in r["mem_per_device_mb"].split("/") if x):
            ax.bar(i, mb, bottom=bottom, color=plt.cm.tab10(d % 10), edgecolor="white",
                   label=f"device {d}" if i == 0 or d >= 1 else None)
            bottom += mb
    handles, names = ax.get_legend_handles_labels()
    uniq = dict(zip(names, handles))
    ax.legend(uniq.values(), uniq.keys(), fontsize=8)
    ax.set_xticks(range(len(rows)), labels, fontsize=8)
    ax.set_ylabel("peak allocated MB (stacked per device)")
    ax.set_title("Peak memory per device", fontsize=9)
    fig.tight_layout()
    fig.savefig(args.out + "_memory.png", dpi=120)
    print(args.out + "_throughput.png", args.out + "_memory.png")


if __name__ == "__main__":
    main()
