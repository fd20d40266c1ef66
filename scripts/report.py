#!/usr/bin/env python3
"""Comparison table from ddpbench result rows, in the shape of the tables users
compare us with (strategy, devices, throughput, memory per device, accuracy,
scaling efficiency, parity). Standard library only.

    scripts/report.py results/*.csv                 # markdown to stdout
    scripts/report.py --format=csv results/a.csv    # the same table as CSV
"""
import argparse
import csv
import sys

COLUMNS = [
    ("strategy", "strategy"),
    ("devices", None),
    ("model", "model"),
    ("batch/dev", "per_device_batch"),
    ("img/s", "throughput_img_s"),
    ("step p50 ms", "step_ms_p50"),
    ("memory/device MB", "mem_per_device_mb"),
    ("accuracy", "accuracy"),
    ("scaling eff.", "scaling_efficiency"),
    ("parity |dw|", "parity_max_abs_diff"),
    ("detail", None),
]


def devices(row):
    kind = row.get("device_name") or row.get("device", "")
    if row.get("device") == "cpu":
        kind = f"CPU x{row.get('threads_per_device', '?')} thr"
    over = " (oversubscribed)" if row.get("oversubscribed") == "true" else ""
    return f"{row.get('gpus', '?')} x {kind}{over}"


def detail(row):
    parts = []
    for key in ("split", "schedule", "chunks", "bubble_measured", "zero_reduce", "param_mb", "grad_mb",
                "optimizer_state_mb", "zero_expected_mb", "units_gathered_max", "allreduce_hidden_frac", "amp"):
        value = row.get(key, "")
        if value and not (key == "amp" and value == "off"):
            parts.append(f"{key}={value}")
    return " ".join(parts)


def load(paths):
    rows = []
    for path in paths:
        try:
            with open(path, newline="") as f:
                reader = csv.DictReader(f)
                if not reader.fieldnames or "throughput_img_s" not in reader.fieldnames:
                    sys.exit(f"report: {path}: not a ddpbench results file (no throughput_img_s column)")
                rows.extend(reader)
        except OSError as e:
            sys.exit(f"report: {path}: {e.strerror}")
    return rows


def table(rows):
    out = []
    for r in rows:
        cells = []
        for title, key in COLUMNS:
            if title == "devices":
                cells.append(devices(r))
            elif title == "detail":
                cells.append(detail(r))
            else:
                cells.append(r.get(key, ""))
        out.append(cells)
    return [t for t, _ in COLUMNS], out


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("files", nargs="+", help="ddpbench results CSV files")
    parser.add_argument("--format", choices=["markdown", "csv"], default="markdown")
    args = parser.parse_args()
    rows = load(args.files)
    if not rows:
        sys.exit("report: no rows in " + ", ".join(args.files))
    header, body = table(rows)
    if args.format == "csv":
        w = csv.writer(sys.stdout)
        w.writerow(header)
        w.writerows(body)
        return
    print("| " + " | ".join(header) + " |")
    print("|" + "|".join("---" for _ in header) + "|")
    for cells in body:
        print("| " + " | ".join(c.replace("|", "/") for c in cells) + " |")


if __name__ == "__main__":
    main()
