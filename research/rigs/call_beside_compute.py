#!/usr/bin/env python3
"""What a collective issued beside computation costs a CPU rank pinned to one
core, as zero3 issues its prefetch gathers: the measurement behind
research/projection-record.md's "calls that wait for the core".

Two ranks (torch.distributed, Gloo), each pinned to its own core with one
thread, as ddpbench pins CPU ranks (harness/cpu_pinning.h). For each size,
--calls times over, timed together after a barrier, --repeats times:
  alone    the collective, one after another;
  compute  --compute-ms of matrix products (a time-based loop);
  beside   the collective issued asynchronously, the computation, then the wait;
  serial   the collective, then the computation.
Printed per size, each rank's median over the repeats, in ms per call:
alone, beside-exposed = beside - max(alone, compute) (what the step loses
beyond the longer of the two), serial-extra = serial - alone - compute, and
ends-after: in beside, from the computation's end to the wait's (the call's
wait for the core where it would have ended during the computation; about 0
where the scheduler let it on before; projection/timeline.h's CoreWait).
On loopback, or with --rate over the tbf-shaped veth pair of
bench_projection.py (needs root and iproute2).

    .venv/bin/python research/rigs/call_beside_compute.py [--rate=2gbit] [--compute-ms=4]
"""
import argparse
import os
import statistics
import subprocess
import sys
import time

from bench_util import free_port, machine  # research/rigs/bench_util.py, beside this one

COLLECTIVES = ("all-gather", "all-reduce")


def rank_main():
    import torch
    import torch.distributed as dist
    rank = int(os.environ["RANK"])
    os.sched_setaffinity(0, {rank % os.cpu_count()})
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    compute_ms, calls, repeats = float(os.environ["CBC_COMPUTE_MS"]), int(os.environ["CBC_CALLS"]), \
        int(os.environ["CBC_REPEATS"])
    a, b = torch.randn(160, 160), torch.randn(160, 160)

    def compute():
        end = time.perf_counter() + compute_ms / 1e3
        while time.perf_counter() < end:
            torch.mm(a, b)

    def timed(step):  # ms per call of `calls` steps after a barrier
        dist.barrier()
        t0 = time.perf_counter()
        for _ in range(calls):
            step()
        return (time.perf_counter() - t0) / calls * 1e3

    out = {}
    for size in (int(s) for s in os.environ["CBC_SIZES"].split(",")):
        whole = torch.ones(max(2, size // 4) // 2 * 2)
        if os.environ["CBC_COLLECTIVE"] == "all-gather":
            half = torch.ones(whole.numel() // 2)

            def issue(async_op=False):
                return dist.all_gather_into_tensor(whole, half, async_op=async_op)
        else:
            def issue(async_op=False):
                return dist.all_reduce(whole, async_op=async_op)
        after = []  # per call: ms from the computation's end to the wait's

        def beside_one():  # as zero3 prefetches: issued, computed beside, then waited for
            work = issue(True)
            compute()
            computed = time.perf_counter()
            work.wait()
            after.append((time.perf_counter() - computed) * 1e3)

        def serial_one():
            issue()
            compute()

        got = {"alone": [], "beside-exposed": [], "serial-extra": [], "ends-after": []}
        for _ in range(repeats):
            alone = timed(issue)
            alone_compute = timed(compute)
            beside = timed(beside_one)
            serial = timed(serial_one)
            got["alone"].append(alone)
            got["beside-exposed"].append(beside - max(alone, alone_compute))
            got["serial-extra"].append(serial - alone - alone_compute)
            got["ends-after"].append(statistics.median(after))
            after.clear()
        out[size] = {k: statistics.median(v) for k, v in got.items()}
    every = [None, None]
    dist.all_gather_object(every, out)
    if rank == 0:
        for size in out:
            print(f"{size:>9d} B  " + "  ".join(f"{k} {every[0][size][k]:.2f}/{every[1][size][k]:.2f}"
                                               for k in out[size]), flush=True)
    dist.destroy_process_group()


def parse_args(argv=None):
    import bench_projection as B
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rate", help="tbf rate of the veth pair (tc units, e.g. 2gbit); default: loopback")
    p.add_argument("--collective", default="all-gather", help="one of " + ", ".join(COLLECTIVES))
    p.add_argument("--sizes", default="16384,65536,262144,1048576", help="bytes of the whole buffer, comma-separated")
    p.add_argument("--compute-ms", type=float, default=1.0, help="the computation beside each call")
    p.add_argument("--calls", type=int, default=20, help="calls timed together")
    p.add_argument("--repeats", type=int, default=7, help="timings of each kind per size (the median kept)")
    a = p.parse_args(argv)
    if a.rate is not None:
        try:
            B.parse_rate(a.rate)
        except ValueError as e:
            p.error(f"--rate: {e}")
    if a.collective not in COLLECTIVES:
        p.error(f"--collective={a.collective}: not accepted; accepted: {', '.join(COLLECTIVES)}")
    given = a.sizes
    try:
        a.sizes = [int(s) for s in given.split(",")]
    except ValueError:
        a.sizes = []
    if not a.sizes or min(a.sizes) < 8:
        p.error(f"--sizes={given}: want whole numbers of bytes >= 8, comma-separated")
    if not a.compute_ms > 0:
        p.error(f"--compute-ms={a.compute_ms:g}: want a number of ms > 0")
    for name in ("calls", "repeats"):
        if getattr(a, name) < 1:
            p.error(f"--{name}={getattr(a, name)}: want a whole number >= 1")
    return a, B


def main():
    a, B = parse_args()
    env = {"CBC_RANK": "1", "WORLD_SIZE": "2", "CBC_COMPUTE_MS": str(a.compute_ms), "CBC_CALLS": str(a.calls),
           "CBC_REPEATS": str(a.repeats), "CBC_SIZES": ",".join(map(str, a.sizes)), "CBC_COLLECTIVE": a.collective}
    print(f"{machine()}; {a.collective}, {a.compute_ms:g} ms of computation beside each call, {a.calls} calls "
          f"timed together, median of {a.repeats}; link: {a.rate or 'loopback'}; ms per call, rank 0/rank 1",
          flush=True)
    argv = [sys.executable, os.path.abspath(__file__)]
    if a.rate is None:
        port = str(free_port())
        procs = [subprocess.Popen(argv, env={**os.environ, **env, "RANK": str(i), "MASTER_ADDR": "127.0.0.1",
                                             "MASTER_PORT": port}) for i in (0, 1)]
        sys.exit(max(p.wait(timeout=900) for p in procs))
    link = B.Link("100ms")
    try:
        link.up()
        link.shape(a.rate)
        procs = [subprocess.Popen(link.exec_argv(i, argv, {**env, "RANK": str(i), "MASTER_ADDR": link.addr[0],
                                                           "MASTER_PORT": str(B.MASTER_PORT),
                                                           "GLOO_SOCKET_IFNAME": link.veth[i]})) for i in (0, 1)]
        code = max(p.wait(timeout=900) for p in procs)
    finally:
        link.down()
    sys.exit(code)


if __name__ == "__main__":
    rank_main() if os.environ.get("CBC_RANK") else main()
