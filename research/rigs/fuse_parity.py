#!/usr/bin/env python3
"""--fuse=bn-add-relu against the unfused model on a GPU: the same seeded run
(ResNet, synthetic data, 20 steps by default) three times, unfused twice and
fused once, each saving its final state as a snapshot; prints the final losses
and the largest parameter and running-statistics differences of fused against
unfused, beside unfused against itself (cuDNN is not bit-exact run to run, so
that second pair is the tolerance a fused run is judged by). One CSV line per
comparison is appended to --out.

  research/rigs/fuse_parity.py --binary=build-gpu/ddpbench --out=results/gpu-fuse-parity.csv -- --model=resnet50 \\
      --image-size=64 --batch-size=32 --amp=off
"""
import argparse
import csv
import glob
import os
import socket
import subprocess
import sys
import tempfile
import time

import torch


def parse():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--binary", default="build-gpu/ddpbench")
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--out", required=True, help="CSV to append one line per comparison to")
    p.add_argument("workload", nargs="*", help="flags after -- go to every ddpbench run")
    a = p.parse_args()
    if a.steps < 1:
        p.error(f"--steps={a.steps}: must be at least 1")
    if not os.access(a.binary, os.X_OK):
        p.error(f"--binary={a.binary}: not an executable file")
    return a


def run(a, fuse, snap_dir, rows):
    cmd = [a.binary, "--device=cuda", "--strategy=single", "--progress=off", "--no-eval", f"--steps={a.steps}",
           "--warmup=0", f"--snapshot-dir={snap_dir}", f"--snapshot-every={a.steps}", f"--fuse={fuse}",
           f"--out={rows}", *a.workload]
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"fuse_parity.py: {' '.join(cmd)} exited {done.returncode}:\n{done.stderr[-2000:]}")
    files = sorted(glob.glob(os.path.join(snap_dir, "*.rank0.pt")))
    if not files:
        sys.exit(f"fuse_parity.py: {' '.join(cmd)} wrote no snapshot in {snap_dir}")
    row = list(csv.DictReader(open(rows)))[-1]
    # ddpbench's own snapshot (torch::pickle_save): trusted, and not weights-only pickle
    return torch.load(files[-1], map_location="cpu", weights_only=False), float(row["final_loss"]), row["fuse"], " ".join(cmd)


def max_diff(x, y, pick):
    worst, name = 0.0, ""
    for k in x:
        if k in y and pick(k) and x[k].is_floating_point() and x[k].shape == y[k].shape:
            d = (x[k].double() - y[k].double()).abs().max().item()
            if d > worst:
                worst, name = d, k
    return worst, name


def main():
    a = parse()
    with tempfile.TemporaryDirectory() as tmp:
        runs = {}
        for name, fuse in [("unfused-a", "off"), ("fused", "bn-add-relu"), ("unfused-b", "off")]:
            runs[name] = run(a, fuse, os.path.join(tmp, name), os.path.join(tmp, name + ".csv"))
    new = not os.path.exists(a.out)
    with open(a.out, "a", newline="") as f:
        w = csv.writer(f)
        if new:
            w.writerow(["timestamp", "host", "pair", "steps", "loss_a", "loss_b", "param_max_abs_diff", "param_worst",
                        "running_max_abs_diff", "fuse_column", "command_b"])
        for pair, (x, y) in {"unfused-a vs unfused-b": ("unfused-a", "unfused-b"),
                             "unfused-a vs fused": ("unfused-a", "fused")}.items():
            sx, lx, _, _ = runs[x]
            sy, ly, fuse_col, cmd = runs[y]
            pd, pn = max_diff(sx, sy, lambda k: "running" not in k and "num_batches" not in k and "optim" not in k)
            rd, _ = max_diff(sx, sy, lambda k: "running" in k)
            print(f"{pair:24s} loss {lx:.6f} / {ly:.6f}  params max |diff| {pd:.3e} ({pn})  running stats {rd:.3e}"
                  f"  [{fuse_col}]")
            w.writerow([time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), socket.gethostname(), pair, a.steps,
                        f"{lx:.6f}", f"{ly:.6f}", f"{pd:.3e}", pn, f"{rd:.3e}", fuse_col, cmd])


if __name__ == "__main__":
    main()
