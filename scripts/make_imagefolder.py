#!/usr/bin/env python3
"""Writes an ImageFolder tree of real-looking JPEGs (DIR/train/<class>/*.jpg,
DIR/val/<class>/*.jpg) for tests, benchmarks and users without image data.

Why it exists: the imagefolder loader and its benchmark need JPEGs
that cost what photos cost to decode (ImageNet-like sizes, smooth content plus
fine texture, quality about 90), and a made-up tree whose classes are
learnable. Every image is a pure function of (--seed, split, class, index).
"""
import argparse
import os

import numpy as np
from PIL import Image


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True, help="root folder to create")
    p.add_argument("--classes", type=int, default=10)
    p.add_argument("--train-per-class", type=int, default=100)
    p.add_argument("--val-per-class", type=int, default=20)
    p.add_argument("--min-size", type=int, default=400, help="smallest width or height, px")
    p.add_argument("--max-size", type=int, default=500, help="largest width or height, px")
    p.add_argument("--quality", type=int, default=90, help="JPEG quality 1-95")
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args()
    checks = [(a.classes >= 1, "--classes", a.classes, ">= 1"),
              (a.train_per_class >= 1, "--train-per-class", a.train_per_class, ">= 1"),
              (a.val_per_class >= 0, "--val-per-class", a.val_per_class, ">= 0"),
              (8 <= a.min_size <= a.max_size, "--min-size", a.min_size, "8..--max-size"),
              (1 <= a.quality <= 95, "--quality", a.quality, "1..95")]
    for ok, flag, value, accepted in checks:
        if not ok:
            p.error(f"{flag}={value} is not accepted; expected {accepted}")
    return a


def class_palette(cls, seed):
    """Two base colours and a stripe angle that make a class learnable."""
    rng = np.random.default_rng([seed, 7919, cls])
    return rng.uniform(30, 225, size=(2, 3)), rng.uniform(0, np.pi)


def photo(cls, rng, seed, w, h):
    """Smooth low-frequency scene + class stripes + fine sensor-like texture."""
    colours, angle = class_palette(cls, seed)
    coarse = rng.uniform(0, 255, size=(6, 8, 3)).astype(np.uint8)
    scene = np.asarray(Image.fromarray(coarse).resize((w, h), Image.BICUBIC), np.float32)
    y, x = np.mgrid[0:h, 0:w].astype(np.float32)
    period = rng.uniform(30, 60)
    t = 0.5 + 0.5 * np.sin((x * np.cos(angle) + y * np.sin(angle)) * 2 * np.pi / period)
    stripes = colours[0] * t[..., None] + colours[1] * (1 - t[..., None])
    texture = rng.normal(0, 9, size=(h, w, 3))
    img = 0.45 * scene + 0.55 * stripes + texture
    return Image.fromarray(np.clip(img, 0, 255).astype(np.uint8))


def write_split(args, split, per_class):
    for cls in range(args.classes):
        folder = os.path.join(args.out, split, f"class_{cls:03d}")
        os.makedirs(folder, exist_ok=True)
        for i in range(per_class):
            rng = np.random.default_rng([args.seed, 0 if split == "train" else 1, cls, i])
            w, h = rng.integers(args.min_size, args.max_size + 1, size=2)
            path = os.path.join(folder, f"img_{i:05d}.jpg")
            photo(cls, rng, args.seed, int(w), int(h)).save(path, "JPEG", quality=args.quality)


def main():
    args = parse_args()
    write_split(args, "train", args.train_per_class)
    if args.val_per_class:
        write_split(args, "val", args.val_per_class)
    total = args.classes * (args.train_per_class + args.val_per_class)
    print(f"wrote {total} JPEGs ({args.classes} classes) under {args.out}")


if __name__ == "__main__":
    main()
