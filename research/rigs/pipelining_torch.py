#!/usr/bin/env python3
"""PyTorch's own pipeline schedules (torch.distributed.pipelining) on CPU
ranks over Gloo: the comparison side of research/rigs/bench_schedules.py.

Trains torchvision's ResNet-18 (the model ddpbench's resnet18 reproduces) cut
into chunks at the same unit boundaries ddpbench's --split uses (units: stem,
layer1.0 ... layer4.1, head), with one of PyTorch's schedule classes, SGD, one
intra-op thread per rank, and prints the images/s of the timed steps.

    .venv/bin/python research/rigs/pipelining_torch.py --schedule=zbv --split=3,2,2,3 \\
        --ranks=2 --batch-size=32 --chunks=8 --image-size=64 --steps=10 --warmup=3

--schedule takes ddpbench's names; chunks per rank: 1 for gpipe and 1f1b,
otherwise len(--split) / --ranks (interleaved ones round-robin, zbv and
dualpipev in a V).
"""
import argparse
import os
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn
from torch.distributed.pipelining import PipelineStage
from torch.distributed.pipelining import schedules as S

from bench_util import free_port

CLASSES = {
    "gpipe": S.ScheduleGPipe, "1f1b": S.Schedule1F1B, "interleaved": S.ScheduleInterleaved1F1B,
    "interleaved-zero-bubble": S.ScheduleInterleavedZeroBubble, "looped-bfs": S.ScheduleLoopedBFS,
    "zbv": S.ScheduleZBVZeroBubble, "dualpipev": S.ScheduleDualPipeV,
}
V_SHAPED = ("zbv", "dualpipev")


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--schedule", required=True, choices=sorted(CLASSES))
    p.add_argument("--split", required=True, help="units per chunk, e.g. 5,5 or 3,2,2,3 (10 units in all)")
    p.add_argument("--ranks", type=int, default=2)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--chunks", type=int, default=8, help="micro-batches")
    p.add_argument("--image-size", type=int, default=64)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--lr", type=float, default=0.01)
    a = p.parse_args(argv)
    try:
        a.split = [int(x) for x in a.split.split(",")]
    except ValueError:
        p.error(f"--split={a.split}: want comma-separated unit counts")
    if sum(a.split) != 10 or min(a.split) < 1:
        p.error(f"--split={a.split}: want counts >= 1 summing to ResNet-18's 10 units")
    if len(a.split) % a.ranks != 0:
        p.error(f"--split has {len(a.split)} chunks, not a multiple of --ranks={a.ranks}")
    if a.batch_size % a.chunks != 0:
        p.error(f"--chunks={a.chunks} does not divide --batch-size={a.batch_size}")
    return a


def units():
    """ResNet-18 as ddpbench's 10 units, with torchvision's module and initialisation."""
    import torchvision
    m = torchvision.models.resnet18(num_classes=1000)
    return [nn.Sequential(m.conv1, m.bn1, m.relu, m.maxpool), m.layer1[0], m.layer1[1], m.layer2[0], m.layer2[1],
            m.layer3[0], m.layer3[1], m.layer4[0], m.layer4[1], nn.Sequential(m.avgpool, nn.Flatten(), m.fc)]


def stage_indices(a, rank):
    n = len(a.split)
    if a.schedule in V_SHAPED:
        return [rank, n - 1 - rank]
    return list(range(rank, n, a.ranks))


def run(rank, a, port, out):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=a.ranks)
    dist.barrier()  # connects the Gloo pairs before the first point-to-point
    skip_self_p2p()
    torch.manual_seed(0)
    parts, at = [], 0
    all_units = units()
    for count in a.split:
        parts.append(nn.Sequential(*all_units[at:at + count]))
        at += count
    n = len(parts)
    mine = stage_indices(a, rank)
    stages = [PipelineStage(parts[i], i, n, torch.device("cpu")) for i in mine]
    params = [p for i in mine for p in parts[i].parameters()]
    opt = torch.optim.SGD(params, lr=a.lr, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()
    cls = CLASSES[a.schedule]
    sched = cls(stages[0], a.chunks, loss_fn=loss_fn) if len(stages) == 1 else cls(stages, a.chunks, loss_fn=loss_fn)
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(a.batch_size, 3, a.image_size, a.image_size, generator=gen)
    y = torch.randint(0, 1000, (a.batch_size,), generator=gen)
    first, last = 0 in mine, n - 1 in mine
    start = None
    for step in range(a.warmup + a.steps):
        if step == a.warmup:
            dist.barrier()
            start = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        args = (x,) if first else ()
        kwargs = {"target": y} if last else {}
        sched.step(*args, **kwargs)
        opt.step()
    dist.barrier()
    if rank == 0:
        out.put(a.steps * a.batch_size / (time.perf_counter() - start))
    dist.destroy_process_group()


def skip_self_p2p():
    """PyTorch 2.11's first step connects each stage with its neighbours by
    point-to-point ops, also where both stages live on the same rank (the V
    of zbv and dualpipev); Gloo cannot send to its own rank, so those are left
    out (the schedule hands such activations over locally)."""
    from torch.distributed.pipelining.stage import _PipelineStageBase
    original = _PipelineStageBase._get_init_p2p_neighbors_ops

    def without_self(stage):
        me = dist.get_rank(stage.group)
        return [op for op in original(stage) if op.group_peer != me]

    _PipelineStageBase._get_init_p2p_neighbors_ops = without_self


def main():
    a = parse_args()
    ctx = mp.get_context("spawn")
    out = ctx.SimpleQueue()
    mp.spawn(run, args=(a, free_port(), out), nprocs=a.ranks, join=True)
    print(f"{out.get():.2f} img/s")


if __name__ == "__main__":
    sys.exit(main())
