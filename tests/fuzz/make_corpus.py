#!/usr/bin/env python3
"""Writes the fuzz suite's seed inputs (tests/fuzz/corpus/): one small valid
file per reader of outside data, which tests/fuzz_test.cpp and
tests/python/fuzz_readers_test.py mutate thousands of times. Run it again only
to change the seeds; the files are committed.
  tests/fuzz/make_corpus.py [DIR]
"""
import gzip
import os
import random
import struct
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def idx(directory, rng):
    n, side = 4, 6
    pixels = bytes(rng.randrange(256) for _ in range(n * side * side))
    labels = bytes(rng.randrange(10) for _ in range(n))
    with open(f"{directory}/images.idx", "wb") as f:
        f.write(struct.pack(">IIII", 2051, n, side, side) + pixels)
    with open(f"{directory}/labels.idx", "wb") as f:
        f.write(struct.pack(">II", 2049, n) + labels)
    with gzip.open(f"{directory}/images.idx.gz", "wb") as f:
        f.write(struct.pack(">IIII", 2051, n, side, side) + pixels)


def cifar(directory, rng):
    for name, label_bytes, classes in (("cifar10.bin", 1, 10), ("cifar100.bin", 2, 100)):
        with open(f"{directory}/{name}", "wb") as f:
            for _ in range(2):
                if label_bytes == 2:
                    f.write(bytes([rng.randrange(20)]))
                f.write(bytes([rng.randrange(classes)]))
                f.write(bytes(rng.randrange(256) for _ in range(3072)))


def results_csv(directory):
    header = "timestamp,strategy,gpus,device,model,throughput_img_s,peak_mem_mb,accuracy,command"
    rows = ['2026-11-24T10:00:00Z,single,1,cpu,resnet18,101.5,40.2,0.8123,"build/ddpbench --strategy=single"',
            '2026-11-24T10:05:00Z,ddp,2,cpu,resnet18,180.25,41.0,0.8101,"build/ddpbench --strategy=ddp --gpus=2"']
    with open(f"{directory}/results.csv", "w") as f:
        f.write("\n".join([header] + rows) + "\n")


def matrix_toml(directory):
    with open(f"{directory}/matrix.toml", "w") as f:
        f.write('[defaults]\nmodel = "resnet18"\ndevice = "cpu"\nsteps = 4\n\n'
                '[[run]]\nname = "single-1x1"\nstrategy = "single"\n\n[[run]]\nname = "ddp-2x1"\nstrategy = "ddp"\ngpus = 2\nflags = ["--verify"]\n')


def report_inputs(directory):
    """Real rows (the first 6 of results/cpu-2core/strategies/cpu-2core-compare.csv, every column
    ddpbench writes) and a night's failures file, for the report's fuzzing."""
    with open(os.path.join(HERE, "..", "..", "results", "cpu-2core", "strategies", "cpu-2core-compare.csv")) as f:
        lines = f.read().splitlines()
    with open(f"{directory}/report_rows.csv", "w") as f:
        f.write("\n".join(lines[:7]) + "\n")
    with open(f"{directory}/failures.csv", "w") as f:
        f.write("run_id,entry,strategy,gpus,nodes,exit_code,reason,command\n"
                "r1,zero3-2x1,zero3,2,1,2,exit 2: bad flag,build/ddpbench --strategy=zero3 --gpus=2\n"
                "r1,ddp-2x2,ddp,2,2,,needs 2 nodes: not inside a Slurm allocation,srun --nodes=2 build/ddpbench\n")


def main():
    directory = sys.argv[1] if len(sys.argv) > 1 else os.path.join(HERE, "corpus")
    os.makedirs(directory, exist_ok=True)
    rng = random.Random(25)
    idx(directory, rng)
    cifar(directory, rng)
    results_csv(directory)
    matrix_toml(directory)
    report_inputs(directory)


if __name__ == "__main__":
    main()
