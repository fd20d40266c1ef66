#!/usr/bin/env python3
"""Writes a small MNIST-format folder (gzipped IDX files) for the e2e tests:
a bright square's position is the class, so a tiny ResNet can learn it.
  make_idx.py DIR TRAIN_COUNT TEST_COUNT [SEED]
"""
import gzip
import os
import random
import struct
import sys


def write(directory, prefix, n, seed):
    rng = random.Random(seed)
    labels = [rng.randrange(10) for _ in range(n)]
    pixels = bytearray()
    for y in labels:
        img = [[rng.randrange(60) for _ in range(28)] for _ in range(28)]
        r0, c0 = 2 + (y // 5) * 13, 2 + (y % 5) * 5
        for r in range(r0, r0 + 10):
            for c in range(c0, c0 + 4):
                img[r][c] = 200 + rng.randrange(56)
        pixels += bytes(v for row in img for v in row)
    with gzip.open(f"{directory}/{prefix}-images-idx3-ubyte.gz", "wb") as f:
        f.write(struct.pack(">IIII", 2051, n, 28, 28) + bytes(pixels))
    with gzip.open(f"{directory}/{prefix}-labels-idx1-ubyte.gz", "wb") as f:
        f.write(struct.pack(">II", 2049, n) + bytes(labels))


def main():
    directory, train, test = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    seed = int(sys.argv[4]) if len(sys.argv) > 4 else 1
    os.makedirs(directory, exist_ok=True)
    write(directory, "train", train, seed)
    write(directory, "t10k", test, seed + 1)


if __name__ == "__main__":
    main()
