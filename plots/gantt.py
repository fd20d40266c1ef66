#!/usr/bin/env python3
"""A Gantt chart PNG of a Chrome trace (ddpbench --trace, scripts/nvtx_trace.py,
or any trace with complete "X" events): one row per rank and thread, one bar
per range coloured by its name, the last --steps "step" ranges' time window.
For a pipeline run each stage thread is a row, so the bubble is the white
between its forward and backward bars; --trace's bars carry their micro-batch
number, zero-bubble's B and W their own colours, and asynchronous collectives
their own "comm" rows.

    plots/gantt.py trace.json --out pmp_gantt.png [--steps 2] [--title ...]
"""
import argparse
import json
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

COLORS = {"forward": "#4477aa", "backward": "#ee6677", "backward B": "#ee6677", "backward W": "#aa3377",
          "optimizer": "#228833", "communication": "#ccbb44", "data": "#bbbbbb", "all-reduce": "#66ccee",
          "reduce-scatter": "#66ccee", "alltoall": "#66ccee", "all-gather": "#99ddff"}


def category(e):
    """The legend entry of a bar: its name, zero-bubble's B/W apart."""
    op = e.get("args", {}).get("op")
    return f"{e['name']} {op}" if op in ("B", "W") else e["name"]


def load(path):
    try:
        with open(path) as f:
            data = json.load(f)
    except (OSError, json.JSONDecodeError) as e:
        sys.exit(f"gantt: {path}: {e}")
    events = data.get("traceEvents", data) if isinstance(data, dict) else data
    names = {(e["pid"], e.get("tid")): e["args"]["name"] for e in events
             if e.get("ph") == "M" and e.get("name") == "thread_name"}
    ranks = {e["pid"]: e["args"]["name"] for e in events if e.get("ph") == "M" and e.get("name") == "process_name"}
    spans = [e for e in events if e.get("ph") == "X"]
    if not spans:
        sys.exit(f"gantt: {path}: no complete (ph X) events")
    return spans, names, ranks


def window(spans, steps):
    """The time span of the last `steps` step ranges of the first rank (all of it without steps)."""
    first = min(e["pid"] for e in spans)
    marks = sorted((e["ts"], e["ts"] + e["dur"]) for e in spans if e["name"] == "step" and e["pid"] == first)
    if not marks:
        return min(e["ts"] for e in spans), max(e["ts"] + e["dur"] for e in spans)
    chosen = marks[-steps:]
    return chosen[0][0], chosen[-1][1]


def draw(spans, names, ranks, steps, title, out):
    lo, hi = window(spans, steps)
    tracks = sorted({(e["pid"], e["tid"]) for e in spans})
    fig, ax = plt.subplots(figsize=(12, 0.6 * len(tracks) + 1.6))
    shown = set()
    for row, track in enumerate(tracks):
        for e in (e for e in spans if (e["pid"], e["tid"]) == track and e["name"] != "step"):
            start, end = max(e["ts"], lo), min(e["ts"] + e["dur"], hi)
            if end > start:
                ax.barh(row, (end - start) / 1e3, left=(start - lo) / 1e3, height=0.7,
                        color=COLORS.get(category(e), "#999999"), edgecolor="white", linewidth=0.4)
                shown.add(category(e))
                label = e.get("args", {}).get("micro_batch")
                if label is not None and (end - start) > 0.015 * (hi - lo):
                    ax.text((start + end - 2 * lo) / 2e3, row, str(label), ha="center", va="center", fontsize=7,
                            color="white")
        for e in (e for e in spans if (e["pid"], e["tid"]) == track and e["name"] == "step"):
            start, end = max(e["ts"], lo), min(e["ts"] + e["dur"], hi)
            if end > start:  # the step as an outline around its phases
                ax.barh(row, (end - start) / 1e3, left=(start - lo) / 1e3, height=0.85, fill=False,
                        edgecolor="#555", linewidth=0.8)
                shown.add("step")
            if lo <= e["ts"] <= hi:
                ax.axvline((e["ts"] - lo) / 1e3, color="#333", lw=0.6, ls=":")
    labels = [f"{ranks.get(p, f'rank {p}')} / {names.get((p, t), f'thread {t}')}" for p, t in tracks]
    ax.set_yticks(range(len(tracks)), labels, fontsize=8)
    ax.invert_yaxis()
    ax.set_title(title, fontsize=9)
    keys = [k for k in COLORS if k in shown]
    handles = [plt.Rectangle((0, 0), 1, 1, color=COLORS[k]) for k in keys]
    if "step" in shown:
        keys.append("step")
        handles.append(plt.Rectangle((0, 0), 1, 1, fill=False, edgecolor="#555"))
    ax.set_xlabel("ms (dotted: step starts; numbers: micro-batches)" if any(
        "micro_batch" in e.get("args", {}) for e in spans) else "ms (dotted: step starts)")
    ax.legend(handles, keys, fontsize=7, ncol=max(1, len(keys)), loc="upper center",
              bbox_to_anchor=(0.5, -0.25 if len(tracks) > 2 else -0.4))
    fig.tight_layout()
    fig.savefig(out, dpi=110)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("trace")
    p.add_argument("--out", required=True, help="PNG to write")
    p.add_argument("--steps", type=int, default=2, help="how many of the last steps to show")
    p.add_argument("--title", default="", help="figure title (default: the trace's file name)")
    args = p.parse_args()
    if args.steps < 1:
        p.error(f"--steps={args.steps}: must be >= 1")
    spans, names, ranks = load(args.trace)
    draw(spans, names, ranks, args.steps, args.title or args.trace, args.out)
    print(args.out)


if __name__ == "__main__":
    main()
