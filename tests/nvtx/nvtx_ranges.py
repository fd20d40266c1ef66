#!/usr/bin/env python3
"""NVTX proof: runs ddpbench with the logging injection library
(NVTX_INJECTION64_PATH) for each strategy and checks that the "ddpbench"
domain is created and that the phase ranges Nsight would show are pushed and
popped in balance on every thread, with data/forward/backward/optimizer inside
"step" on the training thread.

    nvtx_ranges.py BINARY INJECTION_LIBRARY
"""
import collections
import glob
import os
import subprocess
import sys
import tempfile

PHASES = {"step", "data", "forward", "backward", "optimizer"}
COMMON = ["--device=cpu", "--small-input", "--width=4", "--image-size=16", "--num-classes=10",
          "--batch-size=8", "--steps=2", "--warmup=1", "--progress=off"]
# strategy flags -> ranges that must appear in the ddpbench domain
CASES = [
    (["--strategy=single"], PHASES),
    (["--strategy=ddp", "--gpus=2"], PHASES | {"communication"}),
    (["--strategy=zero1", "--gpus=2"], PHASES | {"communication"}),
    (["--strategy=dp", "--gpus=2", "--oversubscribe"], PHASES | {"communication"}),
    (["--strategy=pmp", "--gpus=2", "--oversubscribe", "--chunks=2"], PHASES),
]
# Asked for by the profiling work but not emitted yet: the test fails once they appear,
# so this list is kept honest. (ddp's comm hook now marks each bucket's
# all-reduce launch, so there is none left.)
KNOWN_GAPS = {}


def parse(path):
    """-> (domains created, {thread: [(op, domain, name)]})"""
    domains, threads = set(), collections.defaultdict(list)
    with open(path) as f:
        for line in f:
            tid, _, op, rest = line.rstrip("\n").split(" ", 3)
            if op == "domain":
                domains.add(rest)
            else:
                domain, _, name = rest.partition(" ")
                threads[tid].append((op, domain, name))
    return domains, threads


def check_thread(events, errors, where):
    """Balance and nesting of the ddpbench ranges of one thread; -> names pushed."""
    stack, names = [], set()
    for op, domain, name in events:
        if domain != "ddpbench":
            continue
        if op == "push":
            if name == "step" and stack:
                errors.append(f"{where}: step pushed inside {stack}")
            if name == "data" and "step" not in stack:
                errors.append(f"{where}: data outside step")
            stack.append(name)
            names.add(name)
        elif not stack:
            errors.append(f"{where}: pop without push")
        else:
            stack.pop()
    if stack:
        errors.append(f"{where}: ranges left open at exit: {stack}")
    return names


def run_case(binary, library, flags, tmp):
    prefix = os.path.join(tmp, "nvtx")
    for old in glob.glob(prefix + ".*"):
        os.remove(old)
    env = dict(os.environ, NVTX_INJECTION64_PATH=library, DDPBENCH_NVTX_LOG=prefix)
    out = os.path.join(tmp, "r.csv")
    subprocess.run([binary, *flags, *COMMON, f"--out={out}"], env=env, check=True,
                   stdout=subprocess.DEVNULL)
    return sorted(glob.glob(prefix + ".*"))


def check_case(binary, library, flags, required, tmp):
    strategy = flags[0].split("=")[1]
    errors, logs = [], run_case(binary, library, flags, tmp)
    if not logs:
        return [f"{strategy}: no NVTX log written: the injection library was not loaded"]
    for path in logs:  # one per process (rank)
        where = f"{strategy} pid {path.rsplit('.', 1)[1]}"
        domains, threads = parse(path)
        if "ddpbench" not in domains:
            errors.append(f"{where}: domain ddpbench never created (domains: {sorted(domains)})")
        names, busy_threads = set(), 0
        for tid, events in threads.items():
            got = check_thread(events, errors, f"{where} thread {tid}")
            names |= got
            busy_threads += bool(got & {"forward", "backward"})
        gaps = KNOWN_GAPS.get(strategy, set())
        if required - names:
            errors.append(f"{where}: ranges never pushed: {sorted(required - names)}")
        if gaps & names:
            errors.append(f"{where}: {sorted(gaps & names)} now emitted: remove from KNOWN_GAPS")
        if strategy == "pmp" and busy_threads < 2:
            errors.append(f"{where}: forward/backward ranges on {busy_threads} thread(s), want one per stage")
        print(f"{where}: {sorted(names)} on {len(threads)} thread(s)"
              + (f"; not emitted (known gap): {sorted(gaps)}" if gaps else ""))
    return errors


def main():
    binary, library = sys.argv[1:3]
    errors = []
    with tempfile.TemporaryDirectory() as tmp:
        for flags, required in CASES:
            errors += check_case(binary, library, flags, required, tmp)
    for e in errors:
        print("FAIL:", e)
    print("nvtx_ranges: " + ("all checks passed" if not errors else f"{len(errors)} failure(s)"))
    sys.exit(1 if errors else 0)


if __name__ == "__main__":
    main()
