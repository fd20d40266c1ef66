#!/usr/bin/env python3
"""A point-to-point ping-pong over the tbf-shaped veth pair of bench_projection.py,
in torch.distributed (Gloo), to tell the link from ddpbench's own timing of it.

ddpbench --calibrate timed 1-4 KiB hand-offs over the 100 and 500 Mbit/s pair at
0.6-1.9 ms (half a round trip), where pmp's runs never paid that (research/projection-record.md,
"pmp over the link"). This times the same exchange, each rank's receive posted
before the send, one rank in each namespace: after a barrier, one untimed exchange,
then two back to back timed together (as ddpbench's TimeInRounds does), 40 times a
size; prints median, mean and largest half round trip. --rounds instead goes
through 1 KiB .. 4 MiB in turn, 8 rounds, as the calibration orders them, and
prints every round's half round trip. Needs root and iproute2.

    .venv/bin/python research/rigs/p2p_pingpong.py --rate=500mbit [--pin] [--rounds]
"""
import argparse
import os
import subprocess
import sys
import time

SIZES = (1 << 10, 4 << 10, 8 << 10, 16 << 10, 64 << 10)
REPEATS = 40
ROUND_SIZES = (1 << 10, 4 << 10, 16 << 10, 64 << 10, 256 << 10, 1 << 20, 4 << 20)
ROUNDS = 8


def rank_main():
    import torch
    import torch.distributed as dist
    torch.set_num_threads(1)
    pin = os.environ.get("P2P_PIN")
    if pin:  # as ddpbench pins rank r of a CPU run to core r (app/runner.cpp PinRankToCores)
        os.sched_setaffinity(0, {int(os.environ["RANK"])})
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    peer = 1 - rank

    def exchange(t, back):
        received = dist.irecv(back, peer)
        if rank == 0:
            dist.send(t, peer)
            received.wait()
        else:
            received.wait()
            dist.send(t, peer)

    def burst(t, back):  # ms, half a round trip
        dist.barrier()
        exchange(t, back)
        t0 = time.perf_counter()
        exchange(t, back)
        exchange(t, back)
        return (time.perf_counter() - t0) / 4 * 1e3

    if os.environ.get("P2P_ROUNDS"):
        bufs = {z: (torch.ones(z // 4), torch.empty(z // 4)) for z in ROUND_SIZES}
        per = {z: [] for z in ROUND_SIZES}
        for _ in range(ROUNDS):
            for z in ROUND_SIZES:
                per[z].append(burst(*bufs[z]))
        for z in ROUND_SIZES:
            if rank == 0:
                print(f"{z // 1024:5d} KiB, each round:", " ".join(f"{v:.2f}" for v in per[z]), "ms", flush=True)
    else:
        for size in SIZES:
            t, back = torch.ones(size // 4), torch.empty(size // 4)
            half = sorted(burst(t, back) for _ in range(REPEATS))
            if rank == 0:
                print(f"{size // 1024:3d} KiB: half round trip median {half[REPEATS // 2]:.3f} ms, "
                      f"mean {sum(half) / REPEATS:.3f}, largest {half[-1]:.3f}", flush=True)
    dist.destroy_process_group()


def main():
    import bench_projection as B
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rate", default="500mbit", help="tbf rate of both ends (tc units)")
    p.add_argument("--pin", action="store_true", help="pin rank r and all its threads to core r, as ddpbench does")
    p.add_argument("--rounds", action="store_true", help="1 KiB .. 4 MiB in turn, round after round, as ddpbench's "
                                                         "calibration times them")
    a = p.parse_args()
    B.parse_rate(a.rate)
    link = B.Link("100ms")
    try:
        link.up()
        link.shape(a.rate)
        what = f"{ROUNDS} rounds of every size in turn" if a.rounds else f"{REPEATS} bursts a size"
        print(f"{B.machine()}; link {a.rate}: {link.tbf(a.rate)}; {what}; "
              f"{'each rank pinned to one core' if a.pin else 'not pinned'}", flush=True)
        procs = []
        for i in (0, 1):
            env = {"RANK": str(i), "WORLD_SIZE": "2", "MASTER_ADDR": link.addr[0],
                   "MASTER_PORT": str(B.MASTER_PORT), "GLOO_SOCKET_IFNAME": link.veth[i], "P2P_RANK": "1", **({"P2P_PIN": "1"} if a.pin else {}),
                   **({"P2P_ROUNDS": "1"} if a.rounds else {})}
            procs.append(subprocess.Popen(link.exec_argv(i, [sys.executable, os.path.abspath(__file__)], env)))
        for proc in procs:
            proc.wait(timeout=300)
    finally:
        link.down()


if __name__ == "__main__":
    rank_main() if os.environ.get("P2P_RANK") else main()
