#!/usr/bin/env python3
"""Where a step's time goes, from a `ddpbench --profile=FILE.json` trace.

On CUDA: device time per step by kind of kernel (convolution, BatchNorm,
elementwise, optimizer, copies, other), how long the device was busy, and the
gaps between kernels inside the profiled window (launch overhead and host
waits); the step is that window divided by the steps profiled (the profile's
`ddpbench_step` ranges). On CPU, where there are no kernels: host time per
step by kind of top-level operator (the optimizer's per-parameter operators
count as elementwise there).

    scripts/profile_breakdown.py run.json [--format=md|csv] [--label=NAME]
"""
import argparse
import collections
import csv
import json
import re
import sys

# First match wins: the optimizer's fused/foreach kernels mention "add" or
# "mul" too, and cuDNN's fused BatchNorm kernels can mention "relu".
KINDS = [
    ("optimizer", re.compile(r"multi_tensor|fused_sgd|fusedsgd|fused_adam|foreach|sgd|adam", re.I)),
    ("batchnorm", re.compile(r"batch_?norm|\bbn_|_bn_|bn_fw|bn_bw|batchnorm|fusednorm|norm_?add_?relu", re.I)),
    ("convolution", re.compile(r"conv|xmma|gemm|cutlass|implicit|dgrad|wgrad|fprop|winograd|nhwc|nchw|cudnn", re.I)),
    ("elementwise", re.compile(r"elementwise|relu|threshold|add|mul|copy|fill|cast|where|clamp", re.I)),
]
ORDER = ["convolution", "batchnorm", "elementwise", "optimizer", "copies", "other"]


def kind_of(name):
    for kind, pattern in KINDS:
        if pattern.search(name):
            return kind
    return "other"


def union_ms(intervals):
    """Length of the union of (start, end) intervals, in the input's unit."""
    total, cur_start, cur_end = 0.0, None, None
    for s, e in sorted(intervals):
        if cur_end is None or s > cur_end:
            if cur_end is not None:
                total += cur_end - cur_start
            cur_start, cur_end = s, e
        else:
            cur_end = max(cur_end, e)
    if cur_end is not None:
        total += cur_end - cur_start
    return total


def top_level(ops):
    """Host operators not nested inside another operator of the same thread."""
    out = []
    by_thread = collections.defaultdict(list)
    for e in ops:
        by_thread[e.get("tid")].append(e)
    for evs in by_thread.values():
        end = -1.0
        for e in sorted(evs, key=lambda x: (x["ts"], -x["dur"])):
            if e["ts"] >= end:
                out.append(e)
                end = e["ts"] + e["dur"]
    return out


def breakdown(events):
    """Per-step figures (ms) of a Kineto trace's events."""
    steps = [e for e in events if e.get("name") == "ddpbench_step" and e.get("cat") == "user_annotation"]
    n = max(len(steps), 1)
    device = [e for e in events if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset") and "dur" in e]
    rows = collections.defaultdict(lambda: {"count": 0, "us": 0.0, "names": collections.Counter()})
    if device:
        source = "device kernels"
        for e in device:
            kind = "copies" if e["cat"] != "kernel" else kind_of(e["name"])
            rows[kind]["count"] += 1
            rows[kind]["us"] += e["dur"]
            rows[kind]["names"][e["name"][:60]] += e["dur"]
        busy = union_ms([(e["ts"], e["ts"] + e["dur"]) for e in device])
        window = max(e["ts"] + e["dur"] for e in device) - min(e["ts"] for e in device)
    else:
        source = "host operators"
        ops = top_level([e for e in events if e.get("cat") == "cpu_op" and "dur" in e])
        for e in ops:
            kind = kind_of(e["name"])
            rows[kind]["count"] += 1
            rows[kind]["us"] += e["dur"]
            rows[kind]["names"][e["name"][:60]] += e["dur"]
        busy = union_ms([(e["ts"], e["ts"] + e["dur"]) for e in ops])
        window = (max(e["ts"] + e["dur"] for e in ops) - min(e["ts"] for e in ops)) if ops else 0.0
    # The step is the profiled window over the steps: on CUDA the device's
    # (the host runs ahead of it, so its step ranges end early).
    host_ms = sum(e["dur"] for e in steps) / 1000.0 / n
    return {
        "source": source, "steps": len(steps), "step_ms": window / 1000.0 / n, "host_ms": host_ms,
        "busy_ms": busy / 1000.0 / n, "gap_ms": (window - busy) / 1000.0 / n,
        "kinds": {k: {"count": v["count"] / n, "ms": v["us"] / 1000.0 / n,
                      "top": v["names"].most_common(1)[0][0] if v["names"] else ""} for k, v in rows.items()},
    }


def table(b, label):
    rows = []
    for kind in ORDER:
        if kind in b["kinds"]:
            k = b["kinds"][kind]
            rows.append([label, kind, f"{k['count']:.0f}", f"{k['ms']:.3f}",
                         f"{k['ms'] / b['step_ms']:.3f}" if b["step_ms"] > 0 else "", k["top"]])
    rows.append([label, "busy (union)", "", f"{b['busy_ms']:.3f}", f"{b['busy_ms'] / b['step_ms']:.3f}" if b["step_ms"] else "", ""])
    rows.append([label, "gaps", "", f"{b['gap_ms']:.3f}", f"{b['gap_ms'] / b['step_ms']:.3f}" if b["step_ms"] else "", ""])
    rows.append([label, "step", "", f"{b['step_ms']:.3f}", "1.000", ""])
    rows.append([label, "host step ranges", "", f"{b['host_ms']:.3f}", "", ""])
    return rows


HEADER = ["label", "kind", "per_step_count", "ms_per_step", "share_of_step", "largest_name"]


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("profile", help="a trace written by ddpbench --profile")
    p.add_argument("--format", choices=["md", "csv"], default="md")
    p.add_argument("--label", default="", help="first column's value (default: the file name)")
    a = p.parse_args(argv)
    try:
        with open(a.profile) as f:
            events = json.load(f).get("traceEvents", [])
    except (OSError, ValueError) as e:
        print(f"profile_breakdown: {a.profile}: not a readable profile trace ({e})", file=sys.stderr)
        return 2
    if not any(e.get("cat") in ("cpu_op", "kernel") for e in events):
        print(f"profile_breakdown: {a.profile}: holds no operators or kernels; want a file written by "
              "ddpbench --profile", file=sys.stderr)
        return 2
    b = breakdown(events)
    rows = table(b, a.label or a.profile)
    if a.format == "csv":
        w = csv.writer(sys.stdout)
        w.writerow(HEADER)
        w.writerows(rows)
    else:
        print(f"{b['source']}, {b['steps']} steps profiled")
        print("| " + " | ".join(HEADER[1:]) + " |")
        print("|" + "---|" * (len(HEADER) - 1))
        for r in rows:
            print("| " + " | ".join(r[1:]) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
