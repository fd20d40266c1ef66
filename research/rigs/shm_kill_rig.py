#!/usr/bin/env python3
"""Random kill -9 of one rank of a 2-rank ddp run over shared memory (the
default --cpu-backend=auto), at a uniformly random moment of its first
seconds, set-up included, many times: does each run end within its timeout
with exit 7 naming the dead rank, and is /dev/shm left as it was?

    research/rigs/shm_kill_rig.py --binary build/ddpbench --runs 40 --within 4 \
        --out results/cpu-2core/shm/kill-rig-YYYYMMDD.csv

One CSV row per run (the seed, the rank killed and when, the exit code, whether
the rank was named, seconds from the kill to the end, segments left), and a
summary line. The e2e test (tests/e2e/shm_runs.sh) kills at each named set-up
point; this rig samples the moments in between.
"""
import argparse
import csv
import os
import platform
import random
import signal
import subprocess
import shutil
import sys
import tempfile
import time

WORK = ["--strategy=ddp", "--gpus=2", "--device=cpu", "--small-input", "--width=8", "--image-size=16",
        "--batch-size=16", "--warmup=1", "--steps=100000", "--progress=off", "--no-eval", "--expected=off"]


def segments():
    return {n for n in os.listdir("/dev/shm") if n.startswith("ddpbench-")}


def cpu_model():
    for line in open("/proc/cpuinfo"):
        if line.startswith("model name"):
            flags = open("/proc/cpuinfo").read()
            isa = "avx512" if " avx512f" in flags else "avx2" if " avx2" in flags else "no avx2"
            return f"{line.split(':', 1)[1].strip()} ({isa})"
    return platform.machine()


def rank_pid(parent, rank):
    try:
        children = open(f"/proc/{parent}/task/{parent}/children").read().split()
    except OSError:
        return None
    for child in children:
        try:
            env = open(f"/proc/{child}/environ", "rb").read().split(b"\0")
        except OSError:
            continue
        if f"RANK={rank}".encode() in env:
            return int(child)
    return None


def one_run(binary, rng, within, timeout_s, tmp):
    rank = rng.randrange(2)
    at = rng.uniform(0.0, within)
    before = segments()
    log_path = os.path.join(tmp, "run.log")
    with open(log_path, "w") as log:
        start = time.monotonic()
        proc = subprocess.Popen([os.path.abspath(binary), *WORK, f"--timeout={timeout_s}"], stdout=log,
                                stderr=subprocess.STDOUT, cwd=tmp,  # its flight records land beside the log
                                env={**os.environ, "OMP_NUM_THREADS": "1"})
        pid = None
        while time.monotonic() - start < at and proc.poll() is None:
            pid = rank_pid(proc.pid, rank) or pid
            time.sleep(0.005)
        while pid is None and proc.poll() is None and time.monotonic() - start < at + 5:  # not yet spawned
            pid = rank_pid(proc.pid, rank)
            time.sleep(0.002)
        killed_at = time.monotonic() - start
        if pid:
            os.kill(pid, signal.SIGKILL)
        else:
            proc.kill()
        try:
            code = proc.wait(timeout=timeout_s + 30)
        except subprocess.TimeoutExpired:
            proc.kill()
            code = "hung"
        ended = time.monotonic() - start
    text = open(log_path).read()
    named = pid is not None and f"rank {rank} (pid {pid}) was killed by signal 9" in text
    left = sorted(segments() - before)
    return {"rank": rank, "target_s": f"{at:.3f}", "killed_at_s": f"{killed_at:.3f}",
            "rank_found": pid is not None, "exit_code": code, "named": named,
            "end_after_kill_s": f"{ended - killed_at:.2f}", "segments_left": ";".join(left)}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--binary", required=True)
    ap.add_argument("--runs", type=int, default=40)
    ap.add_argument("--within", type=float, default=4.0, help="kill moments drawn from [0, WITHIN] s after start")
    ap.add_argument("--timeout", type=float, default=20.0, help="the runs' --timeout")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    if a.runs < 1 or a.within <= 0:
        sys.exit("--runs must be >= 1 and --within > 0")
    rng = random.Random(a.seed)
    tmp = tempfile.mkdtemp(prefix="shm-kill-rig-")
    rows = []
    for i in range(a.runs):
        r = {"run": i, **one_run(a.binary, rng, a.within, a.timeout, tmp)}
        rows.append(r)
        print(r, flush=True)
    shutil.rmtree(tmp, ignore_errors=True)
    machine = f"{platform.node()}, {cpu_model()}, {os.cpu_count()} cores"
    with open(a.out, "w", newline="") as f:
        f.write(f"# {' '.join(sys.argv)}\n# machine: {machine}; {time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())}\n")
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    found = [r for r in rows if r["rank_found"]]
    ok = [r for r in found if r["exit_code"] == 7 and r["named"] and not r["segments_left"]]
    leaks = sum(bool(r["segments_left"]) for r in rows)
    print(f"{len(rows)} runs, {len(found)} with the rank killed; {len(ok)} ended exit 7 naming it with /dev/shm clean; "
          f"{leaks} left segments; slowest end {max(float(r['end_after_kill_s']) for r in found):.1f} s after the kill"
          if found else "no run had its rank found")


if __name__ == "__main__":
    main()
