#!/usr/bin/env python3
"""What PyTorch users run instead of ddpbench's ddp, zero1, zero2, zero3 and
zero3 --replicate-degree (HSDP): the same data-parallel workload on CPU ranks
over Gloo, with PyTorch's own wrappers, timed the way ddpbench times it
(warm-up excluded, wall time of the timed steps between two barriers). Prints
two lines (rank 0):
`torch_sharded mode=<mode> ranks=<n> img/s=<global images per second>`, then
`torch_sharded mode=<mode> rank=0 peak_rss_mb=<MiB> state_mb=<MiB>`: rank 0's
peak resident set size (getrusage(RUSAGE_SELF).ru_maxrss / 1024, the whole
process: Python, torch's libraries, the data pool, every tensor; not
ddpbench's peak_mem_mb, which counts tracked tensor bytes per device), and the
model state rank 0 holds at rest after the last step: its parameters,
gradients and optimizer state, each sharded tensor by its local shard (the
same measure as ddpbench's param_mb + grad_mb + optimizer_state_mb).

Workload, as ddpbench's defaults on CPU: torchvision's ResNet-18 (the model
ddpbench's resnet18 reproduces; at 64 px without --small-input both have the
standard 7x7 stride-2 stem with max-pool), contiguous memory format, 1000
classes, synthetic data (a pool of 4 batches of randn images and uniform
labels per rank, drawn once and cycled), cross-entropy, SGD lr 0.1 momentum
0.9 no weight decay with per-parameter kernels (ddpbench's --optimizer-impl
auto on CPU), one intra-op thread per rank, ranks spawned by
torch.multiprocessing. --batch-size is per rank, as ddpbench's.

Modes:
  ddp              DistributedDataParallel, its defaults (25 MiB buckets,
                   buffers broadcast before every forward): vs ddpbench ddp
  ddp-bucket-view  the same with gradient_as_bucket_view=True: vs ddpbench
                   ddp --gradient-as-bucket-view
  zero1            DDP as above + ZeroRedundancyOptimizer (overlap_with_ddp
                   off): optimizer state sharded, each rank's updated
                   parameters broadcast after the step: vs ddpbench zero1
  fsdp2-noreshard  FSDP2 fully_shard on each BasicBlock and on the root,
                   reshard_after_forward=False (parameters stay gathered from
                   forward to backward, gradients reduce-scattered; ZeRO-2's
                   equivalent): vs ddpbench zero2
  fsdp2            the same with reshard_after_forward=True (parameters freed
                   after each block's forward and gathered again for its
                   backward; ZeRO-3's equivalent): vs ddpbench zero3
  hsdp             FSDP2 as fsdp2 (per BasicBlock then the root,
                   reshard_after_forward=True) on a 2-D mesh
                   (--replicate=R, --ranks/R): parameters sharded within each
                   group of --ranks/R consecutive ranks, each reduced gradient
                   shard all-reduced across the R groups: vs ddpbench zero3
                   --replicate-degree=R
  none             no wrapper and no gradient exchange: each rank trains its
                   own replica, timed between the same two barriers. With
                   --ranks=1 it is PyTorch's single-process baseline; with 2,
                   two singles at once sharing the host
  none-lockstep    as none, plus one barrier after every step: the
                   synchronisation every data-parallel step has (no rank
                   starts step k+1 before the slowest ends step k) with
                   nothing exchanged. Its img/s over twice single's is the
                   scaling no all-reduce can beat on this host

    .venv/bin/python research/rigs/torch_sharded.py --mode=fsdp2 --image-size=64 --batch-size=16 \\
        --steps=20 --warmup=5
    .venv/bin/python research/rigs/torch_sharded.py --mode=hsdp --ranks=4 --replicate=2 \\
        --image-size=64 --batch-size=16 --steps=20 --warmup=5

A mode that this PyTorch cannot run on CPU ranks ends with a line naming it
on stderr and exit status 2.
"""
import argparse
import os
import resource
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn

from bench_util import free_port

MODES = ["ddp", "ddp-bucket-view", "zero1", "fsdp2-noreshard", "fsdp2", "hsdp", "none", "none-lockstep"]
POOL_BATCHES = 4  # ddpbench's synthetic pool (datasets/synthetic.cpp kPoolBatches)


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--mode", required=True, choices=MODES)
    p.add_argument("--model", default="resnet18", choices=["resnet18"])
    p.add_argument("--ranks", type=int, default=2)
    p.add_argument("--image-size", type=int, default=64)
    p.add_argument("--batch-size", type=int, default=16, help="per rank, as ddpbench's --batch-size")
    p.add_argument("--num-classes", type=int, default=1000, help="ddpbench's synthetic default")
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--lr", type=float, default=0.1)
    p.add_argument("--momentum", type=float, default=0.9)
    p.add_argument("--pin", action="store_true",
                   help="pin rank r to the r-th CPU this process may use, as ddpbench pins its CPU ranks")
    p.add_argument("--replicate", type=int, default=2,
                   help="hsdp: replica groups R (mesh (R, ranks/R)); must divide --ranks")
    a = p.parse_args(argv)
    if a.ranks < 1 or a.batch_size < 1 or a.steps < 1 or a.warmup < 0:
        p.error("want --ranks, --batch-size and --steps >= 1, --warmup >= 0")
    if a.mode == "hsdp" and (a.replicate < 1 or a.ranks % a.replicate != 0):
        p.error(f"--replicate={a.replicate} must be >= 1 and divide --ranks={a.ranks} "
                "(the mesh is (replicate, ranks/replicate))")
    return a


def build(a, rank):
    """The model wrapped for a.mode and its optimizer."""
    import torchvision
    torch.manual_seed(42)  # the same weights on every rank (FSDP2 shards each rank's own copy)
    model = torchvision.models.resnet18(num_classes=a.num_classes)
    sgd = dict(lr=a.lr, momentum=a.momentum, weight_decay=0.0, foreach=False)
    if a.mode in ("none", "none-lockstep"):
        return model, torch.optim.SGD(model.parameters(), **sgd)
    if a.mode in ("ddp", "ddp-bucket-view", "zero1"):
        # bucket_cap_mb=25, broadcast_buffers=True
        model = nn.parallel.DistributedDataParallel(model, gradient_as_bucket_view=a.mode == "ddp-bucket-view")
        if a.mode != "zero1":
            return model, torch.optim.SGD(model.parameters(), **sgd)
        from torch.distributed.optim import ZeroRedundancyOptimizer
        opt = ZeroRedundancyOptimizer(model.parameters(), optimizer_class=torch.optim.SGD,
                                      overlap_with_ddp=False, **sgd)
        return model, opt
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    from torchvision.models.resnet import BasicBlock
    if a.mode == "hsdp":  # a 2-D mesh: FSDP2 replicates on dim 0 and shards on dim 1
        mesh = init_device_mesh("cpu", (a.replicate, a.ranks // a.replicate),
                                mesh_dim_names=("replicate", "shard"))
    else:
        mesh = init_device_mesh("cpu", (a.ranks,))
    reshard = a.mode in ("fsdp2", "hsdp")
    for m in model.modules():
        if isinstance(m, BasicBlock):
            fully_shard(m, mesh=mesh, reshard_after_forward=reshard)
    fully_shard(model, mesh=mesh, reshard_after_forward=reshard)  # the stem, fc (and the root's own state)
    return model, torch.optim.SGD(model.parameters(), **sgd)


def local_bytes(t):
    """Bytes of tensor t on this rank: a sharded (DTensor) one's local shard."""
    if t is None or not torch.is_tensor(t):
        return 0
    local = t.to_local() if hasattr(t, "to_local") else t
    return local.numel() * local.element_size()


def state_mb(model, opt):
    """MiB of parameters, gradients and optimizer state this rank holds."""
    total = sum(local_bytes(p) + local_bytes(p.grad) for p in model.parameters())
    states = opt.optim.state if hasattr(opt, "optim") else opt.state  # ZeroRedundancyOptimizer: its own shard's
    for st in states.values():
        total += sum(local_bytes(v) for v in st.values() if torch.is_tensor(v) and v.dim() > 0)
    return total / 2**20


def run(rank, a, port, out):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    if a.pin:
        cores = sorted(os.sched_getaffinity(0))
        os.sched_setaffinity(0, {cores[rank % len(cores)]})
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=a.ranks)
    model, opt = build(a, rank)
    gen = torch.Generator().manual_seed(42 * 1000 + rank)  # each rank its own data, as ddpbench's (seed, rank)
    pool = [(torch.randn(a.batch_size, 3, a.image_size, a.image_size, generator=gen),
             torch.randint(0, a.num_classes, (a.batch_size,), generator=gen)) for _ in range(POOL_BATCHES)]
    start = None
    for step in range(a.warmup + a.steps):
        if step == a.warmup:
            dist.barrier()
            start = time.perf_counter()
        images, labels = pool[step % POOL_BATCHES]
        opt.zero_grad(set_to_none=True)
        loss = nn.functional.cross_entropy(model(images), labels)
        loss.backward()
        opt.step()
        if a.mode == "none-lockstep":
            dist.barrier()
    dist.barrier()
    if rank == 0:
        img_s = a.steps * a.batch_size * a.ranks / (time.perf_counter() - start)
        out.put((img_s, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,  # KiB on Linux
                 state_mb(model, opt)))
    dist.destroy_process_group()


def main():
    a = parse_args()
    try:
        import torchvision  # noqa: F401
    except ImportError:
        sys.exit("torch_sharded.py: torchvision is missing; install it with "
                 ".venv/bin/pip install --no-deps torchvision==0.26.0 pillow")
    if a.mode.startswith("fsdp2") or a.mode == "hsdp":
        try:
            from torch.distributed.fsdp import fully_shard  # noqa: F401
        except ImportError as e:
            print(f"torch_sharded.py: --mode={a.mode}: FSDP2 (torch.distributed.fsdp.fully_shard) is not in "
                  f"torch {torch.__version__}: {e}", file=sys.stderr)
            return 2
    ctx = mp.get_context("spawn")
    out = ctx.SimpleQueue()
    try:
        mp.spawn(run, args=(a, free_port(), out), nprocs=a.ranks, join=True)
    except mp.ProcessRaisedException as e:
        last = str(e).strip().splitlines()[-1] if str(e).strip() else repr(e)
        print(f"torch_sharded.py: --mode={a.mode} does not run on {a.ranks} CPU ranks over Gloo with torch "
              f"{torch.__version__}: {last}", file=sys.stderr)
        return 2
    except mp.ProcessExitedException as e:
        print(f"torch_sharded.py: --mode={a.mode}: a rank died: {e}", file=sys.stderr)
        return 2
    img_s, rss_mb, held_mb = out.get()
    print(f"torch_sharded mode={a.mode} ranks={a.ranks} img/s={img_s:.2f}")
    print(f"torch_sharded mode={a.mode} rank=0 peak_rss_mb={rss_mb:.1f} state_mb={held_mb:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
