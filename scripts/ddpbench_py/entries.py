"""Running ddpbench entries and recording the ones that fail: the part of the
nightly driver (scripts/nightly.py) that scripts/compare.py shares. An entry
is one ddpbench command whose row goes to a shared CSV under a run id and an
entry label; its output goes to its own log file.
"""
import csv
import os
import shlex
import subprocess

from ddpbench_py import rows

FAILURE_COLUMNS = rows.FAILURE_COLUMNS


def ddpbench_args(strategy, flags, out, run_id, entry):
    """The flags every entry of a run gets after its own."""
    return [f"--strategy={strategy}", *flags, f"--out={out}", f"--run-id={run_id}", f"--entry={entry}",
            "--progress=off"]


def last_line(path):
    with open(path, errors="replace") as f:
        lines = [line.strip() for line in f if line.strip()]
    return lines[-1] if lines else "(no output)"


def run_logged(argv, log_path, timeout_s):
    """Runs argv with its output in log_path -> (exit code or None, reason)."""
    with open(log_path, "w") as log:
        log.write("$ " + shlex.join(argv) + "\n")
        log.flush()
        try:
            rc = subprocess.run(argv, stdout=log, stderr=subprocess.STDOUT, timeout=timeout_s).returncode
        except subprocess.TimeoutExpired:
            return None, f"timed out after {timeout_s} s"
        except OSError as e:
            return None, f"cannot start {argv[0]}: {e.strerror}"
    return rc, "" if rc == 0 else last_line(log_path)


def record_failure(path, run_id, entry, rc, reason, argv):
    """Appends one line to <run>.failures.csv (read by rows.load_failures)."""
    new = not os.path.exists(path)
    with open(path, "a", newline="") as f:
        w = csv.DictWriter(f, FAILURE_COLUMNS)
        if new:
            w.writeheader()
        w.writerow({"run_id": run_id, "entry": entry["name"], "strategy": entry["strategy"],
                    "gpus": entry.get("gpus", 1), "nodes": entry.get("nodes", 1),
                    "exit_code": "" if rc is None else rc, "reason": reason, "command": shlex.join(argv)})
