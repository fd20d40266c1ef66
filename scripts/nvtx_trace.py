#!/usr/bin/env python3
"""A Chrome trace (Perfetto, chrome://tracing) of one ddpbench run, made from
its NVTX ranges: the run goes under the logging NVTX injection library that
the tests build (build/tests/libnvtx_log_injection.so), and every "ddpbench"
range becomes a complete event on its rank (pid) and thread (tid), with the
same names Nsight shows (step, data, forward, backward, optimizer,
communication). Pipeline stages run on threads of their own, so a pmp trace
has one track per stage. No GPU or Nsight needed; on CUDA the ranges are the
host-side launch intervals, as NVTX's are. plots/gantt.py draws the trace.

    scripts/nvtx_trace.py OUT.json -- build/ddpbench --strategy=pmp --gpus=2 --device=cpu ...
"""
import argparse
import glob
import json
import os
import subprocess
import sys
import tempfile

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")


def read_log(path):
    """-> {tid: [(ns, op, name)]} of the ddpbench domain."""
    threads = {}
    with open(path) as f:
        for line in f:
            tid, ns, op, rest = line.rstrip("\n").split(" ", 3)
            domain, _, name = rest.partition(" ")
            if op in ("push", "pop") and domain == "ddpbench":
                threads.setdefault(tid, []).append((int(ns), op, name))
    return threads


def complete_events(events):
    """Push/pop pairs -> [(start ns, end ns, name, depth)]."""
    stack, out = [], []
    for ns, op, name in events:
        if op == "push":
            stack.append((ns, name))
        elif stack:
            start, opened = stack.pop()
            out.append((start, ns, opened, len(stack)))
    return out


def thread_name(index, spans):
    if any(name == "step" for _, _, name, _ in spans):
        return "main (steps)"
    return f"worker {index}"


def trace(logs):
    """Chrome trace events of every rank's log; ranks in order of first event."""
    per_rank = [(path, read_log(path)) for path in logs]
    per_rank = [(p, t) for p, t in per_rank if t]
    per_rank.sort(key=lambda pt: min(ev[0][0] for ev in pt[1].values()))
    t0 = min((ev[0][0] for _, t in per_rank for ev in t.values()), default=0)
    events = []
    for rank, (path, threads) in enumerate(per_rank):
        events.append({"ph": "M", "pid": rank, "name": "process_name", "args": {"name": f"rank {rank}"}})
        ordered = sorted(threads.values(), key=lambda ev: ev[0][0])
        for tid, evs in enumerate(ordered):
            spans = complete_events(evs)
            events.append({"ph": "M", "pid": rank, "tid": tid, "name": "thread_name",
                           "args": {"name": thread_name(tid, spans)}})
            events += [{"ph": "X", "pid": rank, "tid": tid, "name": name, "ts": (start - t0) / 1e3,
                        "dur": (end - start) / 1e3, "args": {"depth": depth}}
                       for start, end, name, depth in spans]
    return {"traceEvents": events, "displayTimeUnit": "ms"}


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("out", help="Chrome trace JSON to write")
    p.add_argument("command", nargs=argparse.REMAINDER, help="-- the ddpbench command line")
    p.add_argument("--library", default=os.path.join(ROOT, "build", "tests", "libnvtx_log_injection.so"))
    args = p.parse_args()
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        p.error("no command: give the ddpbench command line after --")
    if not os.path.exists(args.library):
        sys.exit(f"nvtx_trace: {args.library}: not built (cmake --build build --target nvtx_log_injection)")
    with tempfile.TemporaryDirectory() as tmp:
        env = dict(os.environ, NVTX_INJECTION64_PATH=os.path.abspath(args.library),
                   DDPBENCH_NVTX_LOG=os.path.join(tmp, "nvtx"))
        rc = subprocess.run(command, env=env).returncode
        if rc != 0:
            sys.exit(f"nvtx_trace: the run exited {rc}; no trace written")
        data = trace(sorted(glob.glob(os.path.join(tmp, "nvtx.*"))))
    if not any(e["ph"] == "X" for e in data["traceEvents"]):
        sys.exit("nvtx_trace: no ddpbench ranges were recorded (was the library loaded?)")
    with open(args.out, "w") as f:
        json.dump(data, f)
    print(f"nvtx_trace: {sum(e['ph'] == 'X' for e in data['traceEvents'])} ranges -> {args.out}")


if __name__ == "__main__":
    main()
