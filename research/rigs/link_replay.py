#!/usr/bin/env python3
"""Replays one training step's collectives over a tbf-shaped veth pair, without the model.

Why it exists: over a shaped link zero1/zero2 ran ~29% slower than ddp while moving the same
bytes. This script separates the link from the CPU: it runs ddp's and zero1's collectives of one
ResNet-18 (width 16) step, with their bucket sizes and issue order and the compute as sleeps,
on Gloo across two network namespaces (bench_projection.Link), and then times Gloo's all-to-all
and all-gather of one size called back to back and after a barrier. The figures it printed are
quoted in research/projection-record.md ("Validation over shaped links").

  .venv/bin/python research/rigs/link_replay.py --rate=100mbit [--steps=25]

Needs root (network namespaces). Ranks are this file run with --worker inside each namespace
(bench_projection.launch_netns).
"""
import argparse
import os
import statistics
import sys
import tempfile
import time


# Bucket sizes (float32 elements) of ResNet-18 width 16: the Reducer's 1 MiB first bucket and the
# rest; compute of one step on this VM (forward + the backward before the first bucket is ready,
# then the rest of the backward), as sleeps so that the CPU stays idle.
BUCKETS = (262144, 562000)
FORWARD_S, FIRST_BUCKET_S, REST_S = 0.009, 0.003, 0.014


def worker(steps):
    import torch
    import torch.distributed as dist
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    b0, b1 = (torch.randn(n) for n in BUCKETS)

    def ddp_step():
        time.sleep(FORWARD_S + FIRST_BUCKET_S)
        w0 = dist.all_reduce(b0, async_op=True)
        time.sleep(REST_S)
        w1 = dist.all_reduce(b1, async_op=True)
        w0.wait(), w1.wait()

    def zero1_step():  # parameters gathered as the forward starts, gradients reduce-scattered (all-to-all on Gloo)
        gathers = [dist.all_gather_into_tensor(torch.empty_like(b), b[: b.numel() // 2].clone(), async_op=True)
                   for b in (b1, b0)]
        for w in gathers:
            w.wait()
        time.sleep(FORWARD_S + FIRST_BUCKET_S)
        w0 = dist.all_to_all_single(torch.empty_like(b0), b0, async_op=True)
        time.sleep(REST_S)
        w1 = dist.all_to_all_single(torch.empty_like(b1), b1, async_op=True)
        w0.wait(), w1.wait()

    for name, step in (("ddp step", ddp_step), ("zero1 step", zero1_step)):
        for _ in range(5):
            step()
        ms = []
        for _ in range(steps):
            dist.barrier()
            t = time.perf_counter()
            step()
            ms.append((time.perf_counter() - t) * 1e3)
        if dist.get_rank() == 0:
            print(f"{name}: median {statistics.median(ms):.1f} ms (min {min(ms):.1f}, max {max(ms):.1f})", flush=True)

    half = b0[: b0.numel() // 2].clone()
    calls = {"all-to-all 1 MiB": lambda: dist.all_to_all_single(torch.empty_like(b0), b0),
             "all-gather 1 MiB": lambda: dist.all_gather_into_tensor(torch.empty_like(b0), half)}
    for name, call in calls.items():
        for barrier in (False, True):
            ms = []
            for _ in range(steps):
                if barrier:
                    dist.barrier()
                t = time.perf_counter()
                call()
                ms.append(round((time.perf_counter() - t) * 1e3))
            if dist.get_rank() == 0:
                print(f"{name} {'after a barrier' if barrier else 'back to back'}, each call in ms: {ms}", flush=True)
    dist.destroy_process_group()


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rate", default="100mbit", help="tbf rate of the pair, as tc takes it (default 100mbit)")
    ap.add_argument("--steps", type=int, default=25, help="timed steps and calls of each kind (default 25)")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.steps < 1:
        ap.error(f"--steps={a.steps}: must be a positive number of steps")
    if a.worker:
        return worker(a.steps)
    import bench_projection as bp
    try:
        bp.parse_rate(a.rate)
    except ValueError as e:
        ap.error(f"--rate={e}")
    link = bp.Link("100ms")
    try:
        link.up()
        link.shape(a.rate)
        print(f"link: {link.tc[a.rate]}", flush=True)
        with tempfile.TemporaryDirectory(prefix="link_replay.") as tmp:
            argv = [sys.executable, os.path.abspath(__file__), "--worker", f"--steps={a.steps}"]
            bp.launch_netns(argparse.Namespace(run_timeout=600), link, argv, "replay", tmp)
            with open(os.path.join(tmp, "netns-rank0.log")) as log:
                print(log.read(), end="")
    except RuntimeError as e:
        print(f"link_replay: {e}", file=sys.stderr)
        return 1
    finally:
        link.down()

if __name__ == "__main__":
    sys.exit(main())
