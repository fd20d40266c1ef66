#!/usr/bin/env python3
"""The honest comparison for ddpbench's single strategy: the same workload in
plain PyTorch eager (torchvision's ResNet, synthetic images, SGD momentum,
cross-entropy), timed the way ddpbench times it (warm-up excluded, wall time
of the timed steps ending with a device synchronisation). Prints one line:
`pytorch_eager img/s=<figure>`.

  .venv/bin/python research/rigs/pytorch_eager.py --model=resnet18 --image-size=64 --batch-size=16 \
      --device=cpu --threads=1 --steps=20 --warmup=5
"""
import argparse
import sys
import time

import torch


def parse():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="resnet18", choices=["resnet18", "resnet34", "resnet50", "resnet101", "resnet152"])
    p.add_argument("--image-size", type=int, default=224)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--num-classes", type=int, default=1000)
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu", choices=["cpu", "cuda"])
    p.add_argument("--threads", type=int, default=1, help="CPU intra-op threads")
    p.add_argument("--amp", default="off", choices=["off", "bf16", "fp16"])
    p.add_argument("--memory-format", default="channels_last", choices=["channels_last", "contiguous"])
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--warmup", type=int, default=15)
    p.add_argument("--lr", type=float, default=0.1)
    p.add_argument("--fused", action="store_true", help="torch.optim.SGD(fused=True)")
    p.add_argument("--compile", action="store_true",
                   help="torch.compile(model) with its default mode (Inductor): the comparison for --fuse; "
                        "compilation happens in the warm-up steps, outside the timing")
    p.add_argument("--ddp", action="store_true",
                   help="wrap the model in DistributedDataParallel, world 1 (nccl on CUDA, gloo on CPU), "
                        "DDP's defaults: the comparison for ddpbench --strategy=ddp --gpus=1")
    return p.parse_args()


def main():
    a = parse()
    try:
        import torchvision
    except ImportError:
        sys.exit("pytorch_eager.py: torchvision is missing; install it with "
                 ".venv/bin/pip install --no-deps torchvision==0.26.0 pillow")
    if a.device == "cpu":
        torch.set_num_threads(a.threads)
    torch.backends.cudnn.benchmark = True
    torch.manual_seed(42)
    dev = torch.device(a.device)
    fmt = torch.channels_last if a.memory_format == "channels_last" else torch.contiguous_format
    model = getattr(torchvision.models, a.model)(num_classes=a.num_classes).to(dev, memory_format=fmt)
    if a.ddp:
        import torch.distributed as dist
        dist.init_process_group("nccl" if a.device == "cuda" else "gloo", init_method="tcp://127.0.0.1:0",
                                world_size=1, rank=0)
        model = torch.nn.parallel.DistributedDataParallel(model)
    if a.compile:
        model = torch.compile(model)
    opt = torch.optim.SGD(model.parameters(), lr=a.lr, momentum=0.9, fused=a.fused or None)
    g = torch.Generator().manual_seed(42)
    images = torch.randn(a.batch_size, 3, a.image_size, a.image_size, generator=g).to(dev, memory_format=fmt)
    labels = torch.randint(0, a.num_classes, (a.batch_size,), generator=g).to(dev)
    amp = {"off": None, "bf16": torch.bfloat16, "fp16": torch.float16}[a.amp]
    scaler = torch.amp.GradScaler(a.device, enabled=a.amp == "fp16")

    def step():
        opt.zero_grad(set_to_none=True)
        with torch.autocast(a.device, dtype=amp or torch.float32, enabled=amp is not None):
            loss = torch.nn.functional.cross_entropy(model(images).float(), labels)
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()

    sync = torch.cuda.synchronize if a.device == "cuda" else (lambda: None)
    for _ in range(a.warmup):
        step()
    sync()
    t0 = time.perf_counter()
    for _ in range(a.steps):
        step()
    sync()
    print(f"pytorch_eager img/s={a.batch_size * a.steps / (time.perf_counter() - t0):.2f}")
    if a.ddp:
        torch.distributed.destroy_process_group()


if __name__ == "__main__":
    main()
