"""A torchrun elastic drill on one machine: two agents ("nodes", one rank each)
train one ddpbench run; one agent is killed with -9 mid-run, and the
survivor's group must go on on 1 rank from the newest snapshot; with
`grow`, a third agent started later must make the group grow back to 2 ranks,
resuming from the 1-rank group's newest snapshot. scripts/chaos.py (its
elastic scenarios) and tests/e2e/elastic.sh run it; both check the same facts
(Drill.problems), the test adds the comparison with an uninterrupted run.

Settings and why (torch 2.11):
- TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1. By default each agent hands its
  workers one store address, fixed at its first rendezvous round: the rank-0
  agent of that round publishes it under that round's keys, and no later
  round publishes it again. An agent joining in a later round waits for that
  round's MASTER_ADDR key, which nobody writes, and fails after 60 s
  (DistStoreError ... torch.rendezvous.<id>.<round>/MASTER_ADDR): growing
  back never happens. With sharing off, every round's rank-0 agent publishes
  a fresh port and ddpbench's rank 0 serves a new store on it, so no round
  sees another round's keys.
- keep_alive_interval=1,keep_alive_max_attempt=3: the killed agent leaves the
  rendezvous after 3 s of silence (the default is 15 s).
- The agent to be killed starts first, the one hosting the rendezvous store
  second: both are up before either's last call (2 s) ends, so the first
  group has 2 ranks even when starting Python takes seconds.
- The returning agent's Python starts with the others and imports torch
  then, but joins only when the drill opens its gate: on a loaded machine
  importing torch took 13 s once, longer than the 1-rank group had left.

  PYTHONPATH=scripts python3 -m ddpbench_py.elastic_drill --binary build/ddpbench --dir DIR [--grow] -- FLAGS...
"""
import argparse
import csv
import glob
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field

from ddpbench_py import snapshot_audit

RDZV_CONF = "last_call_timeout=2,keep_alive_interval=1,keep_alive_max_attempt=3"
PACE_MS = 300  # each step's added delay, so that the drill can act between snapshots
LAUNCH_VARS = re.compile(r"^(RANK|WORLD_SIZE|LOCAL_RANK|LOCAL_WORLD_SIZE|MASTER_ADDR|MASTER_PORT|SLURM_\w+|OMPI_\w+)$")


def torchrun_path():
    """The repository venv's torchrun, else the one on PATH, else None."""
    venv = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", ".venv", "bin", "torchrun")
    return os.path.abspath(venv) if os.access(venv, os.X_OK) else shutil.which("torchrun")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def descendants(pid):
    """Every process under pid (torchrun starts its workers in sessions of their own)."""
    children = {}
    for stat in glob.glob("/proc/[0-9]*/stat"):
        try:
            fields = open(stat).read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        children.setdefault(int(fields[1]), []).append(int(stat.split("/")[2]))
    out, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out


# torchrun's own main, run once the gate file exists (torch imported before).
GATED = ("import os, sys, time\n"
         "from torch.distributed import run\n"
         "while not os.path.exists(sys.argv[1]):\n"
         "    time.sleep(0.05)\n"
         "run.main(sys.argv[2:])\n")


def _python_of(script):
    """The interpreter a console script (torchrun) names on its #! line."""
    first = open(script).readline()
    return first[2:].strip() if first.startswith("#!") else sys.executable


class Agent:
    """One torchrun agent with one ddpbench rank; its output goes to LOG. With a
    gate, it waits (torch already imported) until that file exists."""

    def __init__(self, torchrun, port, is_host, cmd, log, gate=None):
        self.log = log
        env = {k: v for k, v in os.environ.items() if not LAUNCH_VARS.match(k)}
        # LOGLEVEL=INFO: the agent logs its rendezvous rounds, so a drill that stalls says where.
        env.update(TORCH_DISABLE_SHARE_RDZV_TCP_STORE="1", DDPBENCH_TEST_STEP_DELAY_MS=str(PACE_MS), LOGLEVEL="INFO")
        conf = f"{RDZV_CONF},is_host={'true' if is_host else 'false'}"
        launcher = [_python_of(torchrun), "-c", GATED, gate] if gate else [torchrun]
        self.proc = subprocess.Popen(
            launcher + ["--nnodes=1:2", "--nproc-per-node=1", "--rdzv-backend=c10d", f"--rdzv-endpoint=127.0.0.1:{port}",
             "--rdzv-id=drill", "--max-restarts=3", f"--rdzv-conf={conf}", "--monitor-interval=0.5", "--no-python"]
            + cmd, stdout=open(log, "w"), stderr=subprocess.STDOUT, env=env, start_new_session=True)

    def text(self):
        try:
            return open(self.log, errors="replace").read()
        except OSError:
            return ""

    def kill(self):
        """-9 to the agent and its worker at once: a node gone."""
        for pid in [self.proc.pid] + descendants(self.proc.pid):
            try:
                os.kill(pid, 9)
            except ProcessLookupError:
                pass

    def wait(self, limit_s):
        try:
            return self.proc.wait(timeout=limit_s)
        except subprocess.TimeoutExpired:
            return None


@dataclass
class Drill:
    grow: bool
    problems: list = field(default_factory=list)
    row: dict = None
    rcs: list = field(default_factory=list)
    recovered_s: float = None  # the kill -> the survivor resumed on 1 rank
    grown_s: float = None      # the third agent started -> the group resumed on 2 ranks
    audit: str = ""            # the snapshots' state, one line
    resumed_from: list = field(default_factory=list)  # each restart's snapshot step, in order

    def fail(self, why):
        self.problems.append(why)
        return self


def _wait(until, limit_s, agents):
    """Polls until() for up to limit_s; stops early once every agent has exited."""
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        if until():
            return True
        if all(a.proc.poll() is not None for a in agents):
            return bool(until())
        time.sleep(0.25)
    return False


def _resumes(agents, ranks_before):
    """Resume lines of the run that resharded from a ranks_before-rank layout, any agent's log."""
    pattern = re.compile(rf"resuming from .*; resharded from \S+x{ranks_before}$", re.M)
    return [m for a in agents for m in pattern.findall(a.text())]


def _newest_snapshot(snap_dir, ranks):
    """The newest step of a snapshot written by `ranks` ranks, -1 if none (ddpbench renames a
    manifest into place after its rank files; the drill's end checks every kept one whole)."""
    steps = []
    for manifest in glob.glob(os.path.join(snap_dir, "*-step*.json")):
        try:
            if int(json.load(open(manifest))["layout"]["world"]) == ranks:
                steps.append(snapshot_audit.step_of(manifest))
        except (OSError, ValueError, KeyError):
            pass  # pruned meanwhile
    return max(steps, default=-1)


def run(binary, flags, work_dir, grow, kill_after=6, torchrun=None):
    """Runs the drill; work_dir gets snap/ (the snapshots), run.csv (the row) and a<N>.log (each agent)."""
    torchrun = torchrun or torchrun_path()
    snap, out_csv = os.path.join(work_dir, "snap"), os.path.join(work_dir, "run.csv")
    cmd = [binary] + flags + [f"--snapshot-dir={snap}", f"--out={out_csv}"]
    port, agents, d = free_port(), [], Drill(grow)
    gate = os.path.join(work_dir, "third-agent.go")
    start = lambda n, host, gate=None: agents.append(
        Agent(torchrun, port, host, cmd, os.path.join(work_dir, f"a{n}.log"), gate))
    try:
        start(2, False)  # the node that will be lost
        start(1, True)   # hosts the rendezvous store and survives
        lost, survivor = agents
        if grow:
            start(3, False, gate)  # the node that returns, held at its gate
        returner = agents[2:]
        joined = lambda: all("joined 2 ranks" in a.text() for a in (lost, survivor))
        if not _wait(joined, 120, [lost, survivor]):
            return d.fail("the first group never joined 2 ranks (agents running: "
                          f"{[a.proc.poll() is None for a in (lost, survivor)]}, their workers: "
                          f"{[len(descendants(a.proc.pid)) for a in (lost, survivor)]})")
        if any("joined 1 ranks" in a.text() for a in agents):
            return d.fail("the first group formed on 1 rank before the second agent joined")
        if not _wait(lambda: _newest_snapshot(snap, 2) >= kill_after, 90, [lost, survivor]):
            return d.fail(f"no 2-rank snapshot of step {kill_after} or later")
        lost.kill()
        killed = time.monotonic()
        if not _wait(lambda: _resumes([survivor], 2), 90, [survivor]):
            return d.fail("the survivor's group did not resume on 1 rank within 90 s")
        d.recovered_s = time.monotonic() - killed
        if grow:
            if not _wait(lambda: _newest_snapshot(snap, 1) > 0, 60, [survivor]):
                return d.fail("the survivor's group wrote no snapshot of its own on 1 rank")
            open(gate, "w").close()
            returned = time.monotonic()
            if not _wait(lambda: _resumes(agents, 1), 90, [survivor] + returner):
                return d.fail("the group did not grow back to 2 ranks within 90 s"
                              + (" (the run ended first)" if survivor.proc.poll() is not None else ""))
            d.grown_s = time.monotonic() - returned
        d.rcs = [a.wait(180) for a in [survivor] + returner]
        if any(rc != 0 for rc in d.rcs):
            return d.fail(f"the remaining agents exited {d.rcs}")
        return _check_outcome(d, agents, snap, out_csv)
    finally:
        for a in agents:
            if a.proc.poll() is None:
                a.kill()
                a.wait(10)


def _check_outcome(d, agents, snap, out_csv):
    """The row (worlds, restarts) and the snapshots (none broken, mixed or lost)."""
    try:
        rows = list(csv.DictReader(open(out_csv)))
    except OSError:
        rows = []
    if len(rows) != 1:
        return d.fail(f"{len(rows)} rows in {out_csv} (one expected)")
    d.row = rows[0]
    ranks = [int(re.search(r":(\d+)x", w).group(1)) for w in d.row["worlds"].split(",")]
    want = [2, 1, 2] if d.grow else [2, 1]
    if ranks != want or d.row["restarts"] != str(len(want) - 1):
        d.fail(f"the row says worlds {d.row['worlds']}, restarts {d.row['restarts']} (expected ranks {want})")
    manifests = sorted(glob.glob(os.path.join(snap, "*-step*.json")), key=snapshot_audit.step_of)
    broken = [p for p in map(snapshot_audit.manifest_problem, manifests) if p]
    logs = [a.text() for a in agents]
    d.resumed_from = snapshot_audit.resumed_steps(logs)
    d.problems += broken + snapshot_audit.resume_problems(logs)
    d.audit = (f"intact step {snapshot_audit.step_of(manifests[-1])}" if manifests and not broken
               else broken[0] if broken else "none")
    return d


def log_tails(work_dir, n=8):
    """The last n lines of each agent's log, for a failure's report."""
    return "".join(f"== {log}\n" + "".join(open(log, errors="replace").readlines()[-n:])
                   for log in sorted(glob.glob(os.path.join(work_dir, "a*.log"))))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--binary", required=True)
    ap.add_argument("--dir", required=True, help="an empty folder for the snapshots (snap/), the row (run.csv), "
                    "the agents' logs (a<N>.log) and what the drill saw (drill.json)")
    ap.add_argument("--grow", action="store_true", help="start a third agent after the kill: the group grows back")
    ap.add_argument("flags", nargs=argparse.REMAINDER, help="-- then ddpbench's flags")
    args = ap.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(124))  # `timeout`: stop the agents on the way out
    flags = args.flags[1:] if args.flags[:1] == ["--"] else args.flags
    if not torchrun_path():
        print("elastic_drill: no torchrun (the repository's .venv or PATH)")
        return 77
    d = run(args.binary, flags, args.dir, args.grow)
    json.dump({"problems": d.problems, "resumed_from": d.resumed_from, "recovered_s": d.recovered_s,
               "grown_s": d.grown_s, "snapshots": d.audit}, open(os.path.join(args.dir, "drill.json"), "w"))
    if d.row:
        print(f"worlds {d.row['worlds']}, restarts {d.row['restarts']}, steps lost {d.row['steps_lost']}; "
              f"snapshots {d.audit}; resumed on the survivor {d.recovered_s:.1f} s after the kill"
              + (f", on 2 ranks again {d.grown_s:.1f} s after the third agent started" if d.grow else ""))
    for p in d.problems:
        print("FAIL: " + p)
    if d.problems:
        print(log_tails(args.dir))
    return 1 if d.problems else 0


if __name__ == "__main__":
    sys.exit(main())
