"""Two builds of ddpbench on the same command in interleaved rounds (A B,
B A, A B, ...): a slow minute on a shared machine hits both alike, so the
per-round ratio B/A is far steadier than either build's own figure. The
runner of scripts/bisect_slow.py and of research/rigs/build_ab.py (several
strategies a round, so that their ratios to each other are interleaved too).
"""
import csv
import math
import os
import statistics
import subprocess
from dataclasses import dataclass

from ddpbench_py import changepoints


@dataclass
class Comparison:
    ratios: list   # B/A throughput, one per round both ran

    @property
    def median(self):
        return statistics.median(self.ratios)

    def slower_p(self):
        """One-sided p-value that B is not slower than A (t-test on the rounds' log ratios)."""
        logs = [math.log(r) for r in self.ratios]
        if len(logs) < 2:
            return 1.0
        mean, sd = statistics.mean(logs), statistics.stdev(logs)
        if sd == 0:
            return 0.0 if mean < 0 else 1.0
        t = mean / (sd / math.sqrt(len(logs)))
        two = changepoints.t_two_sided_p(t, len(logs) - 1)
        return two / 2 if t < 0 else 1 - two / 2


def throughput(path):
    """The throughput of the last row of a ddpbench CSV, None when there is none."""
    try:
        with open(path, newline="") as f:
            last = list(csv.DictReader(f))[-1]
        return float(last["throughput_img_s"])
    except (OSError, IndexError, KeyError, ValueError):
        return None


def run_once(argv, log_path, out_csv):
    with open(log_path, "w") as log:
        rc = subprocess.run(argv, stdout=log, stderr=subprocess.STDOUT).returncode
    return throughput(out_csv) if rc == 0 else None


def run_rounds(builds, commands, rounds, work_dir):
    """builds: [(label, binary)]; commands: {name: command(binary, out_csv, run_id) -> argv}.
    Each round runs every command with every build, the builds' order reversed every
    other round. -> {(label, name): {round: throughput}} of the runs that succeeded."""
    os.makedirs(work_dir, exist_ok=True)
    values = {(label, name): {} for label, _ in builds for name in commands}
    for r in range(1, rounds + 1):
        for name, command in commands.items():
            for label, binary in builds if r % 2 else builds[::-1]:
                stem = os.path.join(work_dir, f"{label}-{name}-r{r}" if len(commands) > 1 else f"{label}-r{r}")
                if os.path.exists(stem + ".csv"):
                    os.remove(stem + ".csv")
                run_id = f"ab-{label}-{name}-r{r}" if len(commands) > 1 else f"ab-{label}-r{r}"
                got = run_once(command(binary, stem + ".csv", run_id), stem + ".log", stem + ".csv")
                if got is not None:
                    values[(label, name)][r] = got
    return values


def ratio(values, top, bottom):
    """Comparison of values[top] over values[bottom], round by round where both ran."""
    return Comparison([values[top][r] / values[bottom][r] for r in values[bottom] if r in values[top]])


def compare(a, b, command, rounds, work_dir):
    """a, b: (label, binary); command(binary, out_csv, run_id) -> argv.
    -> Comparison of b against a over the rounds in which both ran."""
    values = run_rounds([a, b], {"run": command}, rounds, work_dir)
    return ratio(values, (b[0], "run"), (a[0], "run"))
