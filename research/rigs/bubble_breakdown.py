#!/usr/bin/env python3
"""Where a pipeline's bubble sits: reads ddpbench --trace files of pmp runs
and splits each device's idle time in the timed steps into its parts. Not a
test: it measures.

For every timed step (the main thread's "step" range) the work window is from
the first schedule action on any device to the last one's end; each device's
time in the step is then
  busy    its actions (forward, backward, B, W; nested ranges not counted twice),
  fill    the window's start to its own first action (waiting for the first input),
  drain   its last action's end to the window's end (the others finishing),
  waits   gaps between its actions, by what the next action waited for:
          F (an activation from the chunk before), B or backward (a gradient
          from the chunk after), W (nothing: a gap before a W is the thread's own),
  outside the step's wall time outside the window (data, optimizer, hand-over).
The bubble over the window is 1 - busy / (devices x window); over the step,
ddpbench's bubble_measured, it also counts `outside`.

    .venv/bin/python research/rigs/bubble_breakdown.py a_trace.json [b_trace.json ...]
"""
import argparse
import collections
import json
import statistics

ACTIONS = {"forward", "backward", "backward_input", "backward_weight", "B", "W", "F", "weight"}


def load(path):
    doc = json.load(open(path))
    events = doc["traceEvents"] if isinstance(doc, dict) else doc
    names = {e["tid"]: e["args"]["name"] for e in events if e.get("ph") == "M" and e.get("name") == "thread_name"}
    return [e for e in events if e.get("ph") == "X"], names


def op_of(e):
    op = (e.get("args") or {}).get("op")
    return str(op) if op is not None else e["name"]


def merge(intervals):
    out = []
    for s, t, op in sorted(intervals):
        if out and s <= out[-1][1]:
            out[-1][1] = max(out[-1][1], t)
        else:
            out.append([s, t, op])
    return out


def breakdown(path):
    events, names = load(path)
    steps = sorted((e["ts"], e["ts"] + e["dur"]) for e in events if e["tid"] == 0 and e["name"] == "step")
    devices = sorted(t for t in names if t != 0)
    per = collections.defaultdict(lambda: collections.defaultdict(list))  # device -> part -> ms per step
    wall = []
    for s0, s1 in steps:
        acts = {d: merge([(e["ts"], e["ts"] + e["dur"], op_of(e)) for e in events
                          if e["tid"] == d and s0 <= e["ts"] < s1 and e["name"] in ACTIONS])
                for d in devices}
        if not all(acts.values()):
            continue
        w0 = min(a[0][0] for a in acts.values())
        w1 = max(a[-1][1] for a in acts.values())
        wall.append((s1 - s0) / 1e3)
        for d, a in acts.items():
            parts = collections.Counter()
            parts["busy"] = sum(t - s for s, t, _ in a)
            parts["fill"] = a[0][0] - w0
            parts["drain"] = w1 - a[-1][1]
            for (_, prev_end, _), (s, _, op) in zip(a, a[1:]):
                parts[f"wait before {op}"] += s - prev_end
            parts["outside"] = (s1 - s0) - (w1 - w0)
            for k, v in parts.items():
                per[d][k].append(v / 1e3)
    return per, names, wall


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("traces", nargs="+")
    args = p.parse_args()
    for path in args.traces:
        per, names, wall = breakdown(path)
        if not wall:
            print(f"{path}: no timed step with every device's actions")
            continue
        step = statistics.mean(wall)
        print(f"{path}: {len(wall)} steps, mean step {step:.1f} ms")
        total = collections.Counter()
        for d in sorted(per):
            parts = {k: statistics.mean(v) for k, v in per[d].items()}
            total.update(parts)
            print(f"  {names.get(d, d)}: " + ", ".join(f"{k} {v:.1f}" for k, v in sorted(parts.items())))
        idle = {k: v for k, v in total.items() if k != "busy"}
        n = len(per)
        window = (total["busy"] + sum(v for k, v in idle.items() if k != "outside")) / n
        print(f"  bubble over the work window {1 - total['busy'] / (n * window):.3f}; over the step "
              f"{1 - total['busy'] / (n * step):.3f}; idle ms per step, all devices: "
              + ", ".join(f"{k} {v:.1f}" for k, v in sorted(idle.items(), key=lambda kv: -kv[1])))


if __name__ == "__main__":
    main()
