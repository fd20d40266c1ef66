#!/usr/bin/env python3
"""The nightly job's driver: runs every entry of a matrix file (TOML) with
ddpbench, all rows of the night in one CSV with one run_id, then the reports
(scripts/report.py) and, when earlier nights exist, the regression gate.

Single-node entries run the binary directly (it spawns its own ranks);
multi-node entries run it through srun across the Slurm allocation, one rank
per device. A failed entry is logged, recorded in <night>.failures.csv (entry,
exit code, the last line it printed) and the job goes on with the next.

    scripts/nightly.py --matrix=scripts/matrix/gpu.toml            # in sbatch
    scripts/nightly.py --matrix=scripts/matrix/cpu-small.toml --out-dir=/tmp/n

Matrix format (tomllib, Python 3.11's standard library: the job needs no
package beyond the interpreter):

    [defaults]                  # flags for every entry: key = value -> --key=value
    model = "resnet50"          # (underscores become dashes; true -> --flag;
    amp = "bf16"                #  false -> omitted; a list repeats the flag)
    [[run]]
    name = "ddp-2x1"            # label: the row's entry column
    strategy = "ddp"
    gpus = 2                    # devices per node
    nodes = 1                   # > 1: srun across the allocation (ddp, zero*, hsdp, pmp --stage-ranks)
    flags = ["--verify"]        # extra raw flags, after the defaults' flags
    timeout_s = 3600            # optional, default 7200
    launches = 5                # optional (here or in [defaults]), default 1: the
                                # entry runs as that many processes, a row each;
                                # the gate judges the night by their median

A process's own figure varies from one launch to the next (memory layout,
placement: on the 2-core VM 5-9% between launches against 1-2% between the
timed sections of one launch), so several launches per night are what makes
the night's figure steady; --repeat only repeats sections inside one launch.

A machine whose speed drifts from minute to minute (a shared VM) moves every
figure of a night together; --reference-bin=PATH (a pinned build kept on the
node) runs each launch of an entry beside a launch of that build, in ABBA
order, into <night>.reference.csv, and the gate then watches tonight's
throughput over the reference's, in which the drift cancels. The reference
runs the entry's flags without any --inject (faults are tonight's only).
"""
import argparse
import csv
import datetime
import os
import re
import shlex
import signal
import subprocess
import sys
import tomllib

from ddpbench_py import entries  # noqa: E402
from ddpbench_py import rows as R  # noqa: E402

ENTRY_KEYS = {"name", "strategy", "gpus", "nodes", "flags", "timeout_s", "launches"}
# The strategies whose ranks can sit on several nodes (a rank per device); a
# pipeline's too with --stage-ranks (one rank per stage).
MULTI_PROCESS = {"ddp", "zero1", "zero2", "zero3", "hsdp"}
PIPELINES = {"mp", "pmp"}


def multi_process(entry):
    """Whether the entry runs a rank per device, so that its ranks can span nodes."""
    return entry["strategy"] in MULTI_PROCESS or (entry["strategy"] in PIPELINES and "--stage-ranks" in entry.get("flags", []))
LABEL = re.compile(r"^[A-Za-z0-9_.:+-]{1,64}$")


class MatrixError(Exception):
    pass


def as_flags(table):
    """{key: value} of a matrix table -> ddpbench flags."""
    flags = []
    for key, value in table.items():
        if key in ENTRY_KEYS:
            continue
        flag = "--" + key.replace("_", "-")
        for v in value if isinstance(value, list) else [value]:
            if v is True:
                flags.append(flag)
            elif v is not False:
                flags.append(f"{flag}={v}")
    return flags


def check_entry(entry, index, seen):
    where = f"run #{index + 1} ({entry.get('name', 'no name')})"
    name = entry.get("name")
    if not isinstance(name, str) or not LABEL.match(name):
        raise MatrixError(f"{where}: name must be a label of letters, digits and - _ . : + (at most 64)")
    if name in seen:
        raise MatrixError(f"{where}: name '{name}' is used twice; every entry needs its own")
    seen.add(name)
    if not isinstance(entry.get("strategy"), str):
        raise MatrixError(f"{where}: strategy missing")
    for key in ("gpus", "nodes", "launches"):
        if not isinstance(entry.get(key, 1), int) or isinstance(entry.get(key, 1), bool) or entry.get(key, 1) < 1:
            raise MatrixError(f"{where}: {key}={entry.get(key)!r}: must be an integer >= 1")
    if entry.get("nodes", 1) > 1 and not multi_process(entry):
        raise MatrixError(f"{where}: strategy {entry['strategy']} runs in one process; nodes must be 1 "
                          f"(multi-node: {', '.join(sorted(MULTI_PROCESS))}, and mp/pmp with --stage-ranks)")
    if not isinstance(entry.get("flags", []), list):
        raise MatrixError(f"{where}: flags must be a list of strings")


def load_matrix(path):
    try:
        with open(path, "rb") as f:
            matrix = tomllib.load(f)
    except OSError as e:
        raise MatrixError(f"{path}: {e.strerror}")
    except tomllib.TOMLDecodeError as e:
        raise MatrixError(f"{path}: not valid TOML: {e}")
    except UnicodeDecodeError as e:
        raise MatrixError(f"{path}: not UTF-8 text (byte {e.start}: {e.reason}); a TOML file is UTF-8")
    runs = matrix.get("run", [])
    if not runs:
        raise MatrixError(f"{path}: no [[run]] entries")
    unknown = set(matrix) - {"defaults", "run"}
    if unknown:
        raise MatrixError(f"{path}: unknown tables {sorted(unknown)}; accepted: [defaults], [[run]]")
    defaults = matrix.get("defaults", {})
    launches = defaults.get("launches", 1)
    if not isinstance(launches, int) or isinstance(launches, bool) or launches < 1:
        raise MatrixError(f"{path}: [defaults] launches={launches!r}: must be an integer >= 1")
    seen = set()
    for i, entry in enumerate(runs):
        check_entry(entry, i, seen)
    return defaults, runs


def command(binary, defaults, entry, out, run_id):
    """The argv of one entry: direct, or srun across nodes."""
    gpus, nodes = entry.get("gpus", 1), entry.get("nodes", 1)
    flags = [*as_flags(defaults), *defaults.get("flags", []), *as_flags(entry), *entry.get("flags", [])]
    args = entries.ddpbench_args(entry["strategy"], flags, out, run_id, entry["name"])
    if nodes == 1:
        return [binary, f"--gpus={gpus}", *args]
    return ["srun", f"--nodes={nodes}", f"--ntasks={nodes * gpus}", f"--ntasks-per-node={gpus}",
            "--kill-on-bad-exit=1", binary, *args]


def cannot_run(entry):
    """Why a multi-node entry cannot run in this allocation ('' when it can)."""
    nodes = entry.get("nodes", 1)
    if nodes == 1:
        return ""
    if "SLURM_JOB_ID" not in os.environ:
        return f"needs {nodes} nodes: not inside a Slurm allocation (submit with sbatch --nodes={nodes})"
    have = int(os.environ.get("SLURM_JOB_NUM_NODES", os.environ.get("SLURM_NNODES", "1")))
    if have < nodes:
        return f"needs {nodes} nodes, the allocation has {have}"
    return ""


def run_entry(argv, entry, log_path):
    """-> (exit code, reason); the entry's output goes to log_path."""
    reason = cannot_run(entry)
    if reason:
        with open(log_path, "w") as log:
            log.write(reason + "\n")
        return None, reason
    return entries.run_logged(argv, log_path, entry.get("timeout_s", 7200))


def default_run_id(out_dir):
    """UTC time and job id; a requeued Slurm job (same job id) keeps its first
    run id, remembered in <out_dir>/.job-<id>, so the night continues."""
    job = os.environ.get("SLURM_JOB_ID")
    marker = os.path.join(out_dir, f".job-{job}") if job else None
    if marker and os.path.exists(marker):
        with open(marker) as f:
            return f.read().strip()
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H%M%SZ")
    run_id = f"{stamp}-{job or 'local'}"
    if marker:
        os.makedirs(out_dir, exist_ok=True)
        with open(marker, "w") as f:
            f.write(run_id + "\n")
    return run_id


# SIGUSR1/SIGTERM (sbatch --signal=B:USR1@...): the entry running finishes,
# no other starts, and the job asks Slurm to requeue it.
STOP = []


def on_stop_signal(sig, _frame):
    STOP.append(sig)


def measured_entries(night_csv):
    """{entry: rows it already has in this night} (a requeued job runs only the launches left)."""
    if not os.path.exists(night_csv):
        return {}
    counts = {}
    with open(night_csv, newline="") as f:
        for row in csv.DictReader(f):
            counts[row.get("entry", "")] = counts.get(row.get("entry", ""), 0) + 1
    return counts


def launches_of(args, defaults, entry):
    """How many processes this entry runs tonight: --launches, else the entry's, else [defaults]'s, else 1."""
    return args.launches or entry.get("launches", defaults.get("launches", 1))


def run_matrix(args):
    defaults, runs = load_matrix(args.matrix)
    night = os.path.join(args.out_dir, args.run_id)
    if not args.dry_run:
        os.makedirs(night, exist_ok=True)
    failed = 0
    done = measured_entries(night + ".csv")
    for entry in runs:
        if args.only and entry["name"] not in args.only:
            continue
        if STOP:
            print(f"!! signal {STOP[0]}: stopping before {entry['name']}; the requeued job goes on from there",
                  flush=True)
            return night, failed
        launches, before = launches_of(args, defaults, entry), done.get(entry["name"], 0)
        if before >= launches:
            print(f"== {entry['name']}: measured before the requeue; skipped", flush=True)
            continue
        argv = command(args.bin, defaults, entry, night + ".csv", args.run_id)
        print(f"== {entry['name']}: {shlex.join(argv)}" + (f" ({launches} launches)" if launches > 1 else ""),
              flush=True)
        ref = reference_command(args, defaults, entry, night)
        if ref:
            print(f"   reference: {shlex.join(ref)}", flush=True)
        if args.dry_run:
            continue
        failed += run_launches(argv, ref, entry, night, args.run_id, range(before, launches))
    return night, failed


def reference_command(args, defaults, entry, night):
    """The reference build's argv for this entry (no --inject), or None without --reference-bin."""
    if not args.reference_bin:
        return None
    argv = command(args.reference_bin, defaults, entry, R.reference_path(night + ".csv"), args.run_id)
    return [a for a in argv if not a.startswith("--inject=")]


def run_launches(argv, ref, entry, night, run_id, launches):
    """Runs the entry once per launch (its log: <entry>.log, then <entry>.2.log...), each beside a
    launch of the reference build if given (ABBA order; logs <entry>.ref.log...), stopping at the
    first failure of tonight's build, which is recorded; -> 1 if one failed, else 0."""
    for i in launches:
        suffix = f".{i + 1}" if i else ""
        runs = [(argv, ""), (ref, ".ref")] if ref else [(argv, "")]
        for cmd, kind in (runs if i % 2 == 0 else runs[::-1]):
            if STOP:
                return 0
            rc, reason = run_entry(cmd, entry, os.path.join(night, entry["name"] + kind + suffix + ".log"))
            if rc == 0:
                continue
            if kind:  # the yardstick broke, not tonight's build: said, not a failure of the entry
                print(f"!! {entry['name']}: the reference build failed (exit {rc}): {reason}; "
                      f"the rest of its launches run without it", flush=True)
                ref = None
                continue
            print(f"!! {entry['name']} failed (exit {rc}{f', launch {i + 1}' if i else ''}): {reason}", flush=True)
            entries.record_failure(night + ".failures.csv", run_id, entry, rc, reason, cmd)
            return 1
    return 0


def report(args, night):
    """The gate (its lines also kept in <night>.gate.txt), then tables, figures
    and HTML with the gate's verdict in them; -> the gate's exit code."""
    here = os.path.dirname(os.path.abspath(__file__))
    if not os.path.exists(night + ".csv"):
        print(f"!! no rows: every entry failed (see {night}.failures.csv)")
        return 1
    report_py = [sys.executable, os.path.join(here, "report.py"), night + ".csv"]
    gate = subprocess.run([*report_py, f"--against={args.out_dir}", f"--matrix={args.matrix}",
                           *([f"--k={args.k}"] if args.k else []),
                           *([f"--noise-floor={args.noise_floor}"] if args.noise_floor else []), *args.gate],
                          stdout=subprocess.PIPE, text=True)
    print(gate.stdout, end="")
    with open(night + ".gate.txt", "w") as f:
        f.write(gate.stdout)
    subprocess.run([*report_py, f"--markdown={night}.md", f"--html={night}.html", f"--figures={night}",
                    f"--history={args.out_dir}", f"--gate-log={night}.gate.txt"], check=False)
    return gate.returncode


def main():
    signal.signal(signal.SIGUSR1, on_stop_signal)
    signal.signal(signal.SIGTERM, on_stop_signal)
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--matrix", required=True, help="TOML matrix file")
    parser.add_argument("--out-dir", default="results/nightly", help="where the nights are kept")
    parser.add_argument("--run-id", help="the night's label (default: UTC time-jobid, kept across a requeue)")
    parser.add_argument("--bin", default="build/ddpbench")
    parser.add_argument("--only", action="append", help="run only this entry (repeatable)")
    parser.add_argument("--k", help="gate: k x the entry's spread below its median is a regression (scripts/report.py's default)")
    parser.add_argument("--noise-floor", help="gate: least spread as a fraction of the median (scripts/report.py's default)")
    parser.add_argument("--gate", action="append", default=[], metavar="FLAG",
                        help="another flag for the gate, scripts/report.py --against (repeatable): "
                             "--gate=--min-history=8, --gate=--rule=fixed")
    parser.add_argument("--launches", type=int, help="processes per entry tonight, overriding the matrix's launches")
    parser.add_argument("--reference-bin", help="a pinned build run beside each launch (ABBA); the gate watches the ratio")
    parser.add_argument("--no-report", action="store_true", help="rows only: no tables, figures or gate")
    parser.add_argument("--dry-run", action="store_true", help="print each entry's command, run nothing")
    args = parser.parse_args()
    if not args.run_id:
        args.run_id = default_run_id(args.out_dir)
    if args.launches is not None and args.launches < 1:
        parser.error(f"--launches={args.launches}: must be an integer >= 1")
    if args.reference_bin and not (os.path.isfile(args.reference_bin) and os.access(args.reference_bin, os.X_OK)):
        parser.error(f"--reference-bin={args.reference_bin}: not an executable file (a pinned ddpbench build)")
    if not LABEL.match(args.run_id):
        sys.exit(f"nightly: --run-id={args.run_id}: a label is letters, digits and - _ . : + (at most 64)")
    try:
        night, failed = run_matrix(args)
    except MatrixError as e:
        print(f"nightly: {e}", file=sys.stderr)
        sys.exit(2)
    if args.dry_run:
        return
    if STOP:
        job = os.environ.get("SLURM_JOB_ID")
        if job:
            subprocess.run(["scontrol", "requeue", job], check=False)
        print(f"nightly {args.run_id}: preempted (signal {STOP[0]}); rows so far in {night}.csv")
        sys.exit(5)
    gate = 0 if args.no_report else report(args, night)
    print(f"nightly {args.run_id}: {failed} failed entr{'y' if failed == 1 else 'ies'}; "
          f"rows in {night}.csv" + ("; regressions found" if gate else ""))
    sys.exit(1 if failed or gate else 0)


if __name__ == "__main__":
    main()
