#!/usr/bin/env python3
"""Checks a --trace file (Chrome Trace Event Format) the way a viewer reads it
(stdlib only; used by tests/e2e/trace.sh):

- valid JSON with a traceEvents list; one process per rank, named "rank R";
- exactly the expected tracks (thread_name) per rank, plus "comm" lanes when
  collectives are expected;
- on every track the complete events are ordered by start and nested (an
  event lies wholly inside the one around it or after it, never partly
  overlapping), and args.depth is the nesting depth;
- names are the NVTX ranges' (step, data, forward, backward, optimizer,
  communication) on threads, collectives on comm lanes;
- --steps steps on each main track, each holding one data range; pipeline
  stages: one forward and one backward (or B and W) per micro-batch and step,
  micro_batch args 0..chunks-1, and every stage range inside a step's window;
- --collective: every rank has that collective's events with a bucket, one
  per "communication" launch range of its backward, each starting inside its
  launch range.

    check_trace.py FILE --ranks=N --tracks="main,stage 0,stage 1" --steps=4 [--chunks=4]
                   [--ops=F,backward] [--collective=all-reduce] [--also=all-gather]
"""
import argparse
import collections
import json
import sys

PHASES = {"step", "data", "forward", "backward", "optimizer", "communication"}
COLLECTIVES = {"all-reduce", "reduce-scatter", "alltoall", "all-gather"}
EPS = 1e-3  # µs: timestamps are printed to the nanosecond


def fail(message):
    sys.exit(f"check_trace: {message}")


def check_nesting(events, where):
    """Ordered by start; each event inside its parent or after it; depth matches."""
    open_ends, last = [], None
    for e in events:
        key = (e["ts"], -e["dur"])
        if last is not None and key < last:
            fail(f"{where}: {e['name']} at {e['ts']} is out of order")
        last = key
        end = e["ts"] + e["dur"]
        while open_ends and open_ends[-1] <= e["ts"] + EPS:
            open_ends.pop()
        if open_ends and end > open_ends[-1] + EPS:
            fail(f"{where}: {e['name']} at {e['ts']}..{end} overlaps the range around it (ends {open_ends[-1]})")
        depth = e.get("args", {}).get("depth")
        if depth is not None and depth != len(open_ends):
            fail(f"{where}: {e['name']} at {e['ts']} has depth {depth}, nesting says {len(open_ends)}")
        open_ends.append(end)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("trace")
    p.add_argument("--ranks", type=int, required=True)
    p.add_argument("--tracks", required=True, help="thread names of each rank, comma-separated (comm lanes apart)")
    p.add_argument("--steps", type=int, required=True)
    p.add_argument("--chunks", type=int, default=0, help="micro-batches per step on each stage track")
    p.add_argument("--ops", default="F,backward", help="pipeline actions per micro-batch (F,B,W for zero-bubble)")
    p.add_argument("--collective", default="", help="collective every rank's backward launches")
    p.add_argument("--also", default="", help="another collective every rank must show (e.g. all-gather)")
    a = p.parse_args()
    try:
        data = json.load(open(a.trace))
    except (OSError, ValueError) as e:
        fail(f"{a.trace}: not valid JSON: {e}")
    events = data["traceEvents"]
    procs = {e["pid"]: e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "process_name"}
    if procs != {r: f"rank {r}" for r in range(a.ranks)}:
        fail(f"processes {procs}, want ranks 0..{a.ranks - 1}")
    names = {(e["pid"], e["tid"]): e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "thread_name"}
    spans = collections.defaultdict(list)
    for e in events:
        if e["ph"] == "X":
            spans[(e["pid"], e["tid"])].append(e)
        elif e["ph"] != "M":
            fail(f"unexpected event phase {e['ph']}")
    want = a.tracks.split(",")
    for rank in range(a.ranks):
        threads = [names[t] for t in sorted(names) if t[0] == rank and not names[t].startswith("comm")]
        if threads != want:
            fail(f"rank {rank}: tracks {threads}, want {want}")
    for track, evs in spans.items():
        if track not in names:
            fail(f"track {track} has events but no thread_name")
        where = f"rank {track[0]} / {names[track]}"
        check_nesting(evs, where)
        allowed = COLLECTIVES if names[track].startswith("comm") else PHASES
        stray = {e["name"] for e in evs} - allowed
        if stray:
            fail(f"{where}: names {sorted(stray)} are not {sorted(allowed)}")
    for rank in range(a.ranks):
        check_rank(rank, a, {names[t]: evs for t, evs in spans.items() if t[0] == rank})
    print(f"check_trace: {a.trace}: {sum(map(len, spans.values()))} events on {len(spans)} tracks: ok")


def check_rank(rank, a, tracks):
    main_events = tracks["main"]
    steps = [e for e in main_events if e["name"] == "step"]
    if len(steps) != a.steps or [e["args"]["step"] for e in steps] != list(range(len(steps))):
        fail(f"rank {rank}: steps {[e['args'].get('step') for e in steps]}, want 0..{a.steps - 1}")
    data = [e for e in main_events if e["name"] == "data"]
    if len(data) != a.steps or any(e["args"]["depth"] != 1 for e in data):
        fail(f"rank {rank}: want one data range inside each step, got {len(data)}")
    windows = [(e["ts"], e["ts"] + e["dur"]) for e in steps]
    ops = a.ops.split(",")
    for name, evs in tracks.items():
        if not (name.startswith("stage") or name.startswith("device")) or not a.chunks:
            continue
        for e in evs:
            if not any(lo - EPS <= e["ts"] and e["ts"] + e["dur"] <= hi + EPS for lo, hi in windows):
                fail(f"rank {rank} / {name}: {e['name']} at {e['ts']} lies outside every step")
        # A W run in pieces while waiting (--fill-waits) counts once: by the piece that ends it.
        got = collections.Counter((e["args"]["op"], e["args"]["micro_batch"]) for e in evs
                                  if "op" in e["args"] and (not e["args"].get("fill") or e["args"].get("done")))
        expect = collections.Counter({(op, m): a.steps for op in ops for m in range(a.chunks)})
        if got != expect:
            fail(f"rank {rank} / {name}: (op, micro-batch) counts {dict(got)}, want {dict(expect)}")
        for e in evs:
            if "op" in e["args"] and e["name"] != ("forward" if e["args"]["op"] == "F" else "backward"):
                fail(f"rank {rank} / {name}: op {e['args']['op']} is named {e['name']}")
        if sum(e["name"] == "optimizer" for e in evs) != a.steps:
            fail(f"rank {rank} / {name}: want one optimizer range per step")
    if a.collective:
        comm = [e for n, evs in tracks.items() if n.startswith("comm") for e in evs if e["name"] == a.collective]
        launches = [e for e in main_events if e["name"] == "communication"
                    and any(b["ts"] <= e["ts"] <= b["ts"] + b["dur"] for b in main_events if b["name"] == "backward")]
        if not comm or len(comm) != len(launches):
            fail(f"rank {rank}: {len(comm)} {a.collective} events for {len(launches)} launch ranges in backward")
        for c in comm:
            if not isinstance(c["args"].get("bucket"), int):
                fail(f"rank {rank}: {a.collective} at {c['ts']} names no bucket")
            if not any(l["ts"] - EPS <= c["ts"] <= l["ts"] + l["dur"] + EPS for l in launches):
                fail(f"rank {rank}: {a.collective} at {c['ts']} starts in no launch range")
    if a.also and not any(e["name"] == a.also for n, evs in tracks.items() if n.startswith("comm") for e in evs):
        fail(f"rank {rank}: no {a.also} events on the comm tracks")


if __name__ == "__main__":
    main()
