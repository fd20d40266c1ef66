#!/usr/bin/env python3
"""Loads a `ddpbench --export=FILE.pt` state_dict into torchvision's ResNet and
evaluates it on an IDX test set (MNIST / Fashion-MNIST), as the run did:
images / 255, then (x - mean) / std. Where the run's architecture is not
torchvision's standard one, FILE.pt.json names the modules to replace (and
their constructors); they are replaced before loading with strict=True.

  python3 scripts/check_export.py FILE.pt --data-dir=/usr/share/datasets/fashion-mnist \
      --mean=0.2860 --std=0.3530 [--images=N]   # prints "accuracy A over N images"
Exit 2 on a bad argument, 1 when the weights do not load.
"""
import argparse
import gzip
import json
import os
import sys

import numpy as np
import torch
import torchvision


def build(export):
    """torchvision's model for an export, its modules replaced as FILE.pt.json says."""
    info_path = export + ".json"
    state = torch.load(export)
    if not os.path.exists(info_path):
        classes = state["fc.weight"].shape[0]
        depth = 50 if "layer1.0.conv3.weight" in state else 18 if len(state) < 150 else 34
        return getattr(torchvision.models, f"resnet{depth}")(num_classes=classes), state
    info = json.load(open(info_path))
    model = getattr(torchvision.models, info["torchvision"])(num_classes=info["num_classes"])
    for path, constructor in info["replace"].items():
        parent, _, leaf = path.rpartition(".")
        owner = model.get_submodule(parent) if parent else model
        setattr(owner, leaf, eval("torch.nn." + constructor, {"torch": torch}))
    return model, state


def read_idx(path):
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rb") as f:
        data = f.read()
    dims = data[3]
    shape = [int.from_bytes(data[4 + 4 * i:8 + 4 * i], "big") for i in range(dims)]
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * dims).reshape(shape)


def find(folder, stem):
    for name in (stem, stem + ".gz"):
        if os.path.exists(os.path.join(folder, name)):
            return os.path.join(folder, name)
    raise FileNotFoundError(f"{folder}: no {stem}[.gz]")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("export")
    ap.add_argument("--data-dir", required=True)
    ap.add_argument("--mean", type=float, required=True)
    ap.add_argument("--std", type=float, required=True)
    ap.add_argument("--images", type=int, default=0, help="the first N test images (the row's eval_images); 0: all")
    args = ap.parse_args()
    if args.images < 0:
        print(f"check_export: --images={args.images}: must be >= 0", file=sys.stderr)
        return 2
    if not os.path.isfile(args.export):
        print(f"check_export: {args.export}: no such file", file=sys.stderr)
        return 2
    model, state = build(args.export)
    try:
        model.load_state_dict(state, strict=True)
    except RuntimeError as e:
        print(f"check_export: {args.export} does not load: {e}", file=sys.stderr)
        return 1
    images = torch.from_numpy(read_idx(find(args.data_dir, "t10k-images-idx3-ubyte")).copy())
    labels = torch.from_numpy(read_idx(find(args.data_dir, "t10k-labels-idx1-ubyte")).astype(np.int64))
    if args.images:
        images, labels = images[:args.images], labels[:args.images]
    model.eval()
    correct = 0
    with torch.no_grad():
        for i in range(0, len(images), 500):
            x = (images[i:i + 500].float().unsqueeze(1) / 255.0 - args.mean) / args.std
            correct += (model(x).argmax(1) == labels[i:i + 500]).sum().item()
    print(f"accuracy {correct / len(images):.4f} over {len(images)} images")
    return 0


if __name__ == "__main__":
    sys.exit(main())
