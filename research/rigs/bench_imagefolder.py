#!/usr/bin/env python3
"""Benchmarks ddpbench's ImageFolder loader against torchvision's DataLoader
on the same JPEG folder. Not a test: it measures.

Both sides do the same work per image: read the file, decode it, the
training transforms (RandomResizedCrop(SIZE), RandomHorizontalFlip) and
hand over a normalised batch of SIZE x SIZE images. ddpbench runs
`--data-only --data-workers=N` (the loader alone, no model); torchvision runs
ImageFolder + RandomResizedCrop + RandomHorizontalFlip + ToTensor + Normalize
in a DataLoader with num_workers=N. Each side times BATCHES batches after one
untimed batch (worker start-up excluded on both). Rounds are interleaved (each
round runs every (side, workers) pair once, the order alternating), so a slow
minute on a shared machine hits both alike; the table gives each pair's
median images/s, the ratio ddpbench / torchvision per worker count, and
ddpbench's per-stage costs (the row's data_stage_ms, ms per image on one
worker) and the stage that bounds it.

    .venv/bin/python research/rigs/bench_imagefolder.py --data=/tmp/fake-imagenet --rounds=5 \\
        --out=results/cpu-2core/imagefolder/cpu-2core-imagefolder-loader.csv

The folder is made by scripts/make_imagefolder.py (10 classes x 100 train
JPEGs of 400-500 px, quality 90) when --data does not exist yet.
"""
import argparse
import csv
import datetime
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))  # research/rigs/ -> the repository
from bench_util import interleaved, machine, write_results  # noqa: E402


def parse_args():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", default="/tmp/ddpbench-imagefolder-bench", help="ImageFolder root (made if missing)")
    p.add_argument("--binary", default=os.path.join(ROOT, "build", "ddpbench"))
    p.add_argument("--workers", default="1,2,4", help="worker counts, comma-separated")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--batches", type=int, default=20, help="timed batches per run")
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--image-size", type=int, default=224)
    p.add_argument("--out", default=None, help="CSV of every run (appended); a .md table beside it")
    p.add_argument("--note", default="", help="a line about the machine for the .md (e.g. what else ran on it)")
    a = p.parse_args()
    try:
        a.workers = [int(w) for w in a.workers.split(",")]
    except ValueError:
        p.error(f"--workers={a.workers} is not accepted; expected a comma-separated list of integers >= 1")
    for flag, value in (("--rounds", a.rounds), ("--batches", a.batches), ("--batch-size", a.batch_size),
                        ("--image-size", a.image_size), *(("--workers", w) for w in a.workers)):
        if value < 1:
            p.error(f"{flag}={value} is not accepted; expected an integer >= 1")
    if not os.access(a.binary, os.X_OK):
        p.error(f"--binary={a.binary}: not an executable (build it with scripts/setup.sh ddpbench)")
    return a


def ensure_folder(path):
    if os.path.isdir(os.path.join(path, "train")):
        return
    subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "make_imagefolder.py"), "--out", path, "--classes", "10",
                    "--train-per-class", "100", "--val-per-class", "2"], check=True)


def run_ddpbench(a, workers):
    """The data-only row's throughput: timed batches over their wall time."""
    out_csv = os.path.join(a.tmp, "ddpbench.csv")
    cmd = [a.binary, "--strategy=single", "--device=cpu", "--dataset=imagefolder", f"--data-dir={a.data}",
           f"--image-size={a.image_size}", f"--batch-size={a.batch_size}", "--data-only",
           f"--data-workers={workers}", "--warmup=1", f"--steps={a.batches}", "--progress=off", f"--out={out_csv}"]
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    with open(out_csv) as f:
        row = list(csv.DictReader(f))[-1]
    return float(row["throughput_img_s"]), " ".join(cmd), row.get("data_stage_ms", "")


TORCHVISION_SNIPPET = r"""
import sys, time, torch
from torch.utils.data import DataLoader
from torchvision import datasets, transforms
data, workers, batches, batch, size, seed = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]), 0
torch.manual_seed(seed)
tf = transforms.Compose([transforms.RandomResizedCrop(size), transforms.RandomHorizontalFlip(), transforms.ToTensor(),
                         transforms.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225])])
loader = DataLoader(datasets.ImageFolder(data + "/train", tf), batch_size=batch, shuffle=True, num_workers=workers,
                    drop_last=True, persistent_workers=True)
def endless():  # epoch after epoch, as ddpbench's source runs
    while True:
        yield from loader
it = endless()
next(it)  # untimed: worker start-up and the first batch
start = time.perf_counter()
for _ in range(batches):
    next(it)
print(batches * batch / (time.perf_counter() - start))
"""


def run_torchvision(a, workers):
    cmd = [sys.executable, "-c", TORCHVISION_SNIPPET, a.data, str(workers), str(a.batches), str(a.batch_size),
           str(a.image_size)]
    out = subprocess.run(cmd, check=True, stdout=subprocess.PIPE, text=True).stdout
    return float(out.split()[-1]), "python -c <torchvision DataLoader snippet of research/rigs/bench_imagefolder.py>", ""


def median_stages(cells):
    """The median ms per image of each stage over runs' data_stage_ms cells
    ("read:0.1/header:0.01/..."), as one cell, and the stage with the most."""
    parsed = [dict((k, float(v)) for k, v in (p.split(":") for p in c.split("/"))) for c in cells if c]
    if not parsed:
        return "", ""
    med = {k: statistics.median(p[k] for p in parsed) for k in parsed[0]}
    return " ".join(f"{k} {v:.3f}" for k, v in med.items()), max(med, key=med.get)


def main():
    a = parse_args()
    a.data = os.path.abspath(a.data)
    a.tmp = os.path.join(a.data, ".bench")
    os.makedirs(a.tmp, exist_ok=True)
    ensure_folder(a.data)
    pairs = [(side, w) for w in a.workers for side in ("ddpbench", "torchvision")]

    def one(pair):
        side, w = pair
        img_s, cmd, stages = (run_ddpbench if side == "ddpbench" else run_torchvision)(a, w)
        print(f"{side:11s} workers {w}: {img_s:8.1f} img/s {stages}", flush=True)
        return img_s, cmd, stages

    runs = [{"round": r, "side": side, "workers": w, "img_s": round(img_s, 1), "stage_ms": stages, "command": cmd}
            for r, (side, w), (img_s, cmd, stages) in interleaved(pairs, a.rounds, one)]
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    lines = [f"ImageFolder loader: ddpbench --data-only against torchvision DataLoader ({stamp})",
             f"machine: {machine()}",
             f"folder: {a.data} ({sum(len(fs) for _, _, fs in os.walk(os.path.join(a.data, 'train')))} train images), "
             f"batch {a.batch_size}, {a.image_size} px, {a.batches} timed batches, {a.rounds} interleaved rounds",
             f"command: {' '.join(sys.argv)}", *([f"note: {a.note}"] if a.note else []), "",
             "| workers | ddpbench img/s (median, min-max) | torchvision img/s (median, min-max) | ratio | "
             "ddpbench ms/image per stage (median) | bound by |",
             "|---|---|---|---|---|---|"]
    for w in a.workers:
        got = {s: [x["img_s"] for x in runs if x["side"] == s and x["workers"] == w] for s in ("ddpbench", "torchvision")}
        med = {s: statistics.median(v) for s, v in got.items()}
        cell = {s: f"{med[s]:.1f} ({min(v):.1f}-{max(v):.1f})" for s, v in got.items()}
        stages, bound = median_stages([x["stage_ms"] for x in runs if x["side"] == "ddpbench" and x["workers"] == w])
        lines.append(f"| {w} | {cell['ddpbench']} | {cell['torchvision']} | {med['ddpbench'] / med['torchvision']:.2f}x "
                     f"| {stages} | {bound} |")
    print("\n".join(lines))
    if a.out:
        write_results(a.out, runs, stamp, lines)

if __name__ == "__main__":
    main()
