#!/usr/bin/env python3
"""Chaos: fault scenarios against ddpbench, each checked for the cause the run names.

Every scenario runs ddpbench with one fault: a delay (--inject=delay/slow-data),
a hang or a crash (--inject=hang/crash), the link between two hosts taken down,
or one side of it shaped slow (two network namespaces joined by a veth pair,
as tests/e2e/two_hosts_netns.sh makes them), or a whole node lost under
torchrun's elastic agent (two agents, one killed with -9: the survivor goes on
on 1 rank; then a third agent joins: the group grows back to 2 ranks; see
ddpbench_py/elastic_drill.py). It prints one line each:

    scenario  expected cause  named cause  seconds to name it  snapshot state  ok|FAIL

and exits 1 if any scenario's cause was not named as expected, the run went
past its timeout, or a snapshot was lost or mixed. `--quick` runs a short
loopback subset (ctest runs it, beside other tests on a loaded machine: it
checks who and what was named, not how many ms or seconds); the namespace
scenarios need root and iproute2, the elastic ones torchrun, and are skipped
(and said so) without them.

    scripts/chaos.py --binary build/ddpbench [--quick] [--csv results.csv] [--only NAME,...]
"""
import argparse
import csv
import glob
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field

from ddpbench_py import elastic_drill, snapshot_audit

SMALL = ["--device=cpu", "--small-input", "--width=8", "--image-size=16", "--batch-size=16", "--warmup=1",
         "--progress=off", "--no-eval", "--expected=off"]
TIMEOUT_S = 5      # --timeout of the hang and link scenarios
CRASH_NAME_S = 2   # a crash is named within this (the launcher sees the death at once)
TIMING = True      # check the figures (ms within 20%, seconds within bounds); off under --quick


@dataclass
class Scenario:
    name: str
    strategy: list        # --strategy and its own flags
    fault: str            # delay | hang | crash | none | link-down | slow-side | agent-killed | agent-returns
    expect: dict          # rank, phase, ms (delay); rank (hang, crash)
    inject: list = field(default_factory=list)
    netns: bool = False
    world: int = 2
    steps: int = 12
    quick: bool = False


def scenarios():
    ddp, zero1, zero2, zero3 = (["--strategy=" + s] for s in ("ddp", "zero1", "zero2", "zero3"))
    pmp = ["--strategy=pmp", "--stage-ranks"]
    hsdp = ["--strategy=zero3", "--replicate-degree=2"]
    pp_dp = ["--strategy=pmp", "--stage-ranks", "--replicate-degree=2"]
    d = lambda r, p, ms=50: f"delay:rank={r},phase={p},ms={ms}"
    out = [
        Scenario("ddp-none", ddp, "none", {}),
        Scenario("ddp-delay-backward", ddp, "delay", {"rank": 1, "phase": "backward", "ms": 50}, [d(1, "backward")], quick=True),
        Scenario("ddp-slow-data", ddp, "delay", {"rank": 0, "phase": "data", "ms": 50}, ["slow-data:rank=0,ms=50"]),
        Scenario("ddp-hang", ddp, "hang", {"rank": 1}, ["hang:rank=1,step=10"], quick=True),
        Scenario("ddp-crash", ddp, "crash", {"rank": 1}, ["crash:rank=1,step=6"], quick=True),
        Scenario("zero1-delay-optimizer", zero1, "delay", {"rank": 0, "phase": "optimizer", "ms": 50}, [d(0, "optimizer")]),
        Scenario("zero2-delay-forward", zero2, "delay", {"rank": 1, "phase": "forward", "ms": 50}, [d(1, "forward")]),
        Scenario("zero3-delay-backward", zero3, "delay", {"rank": 1, "phase": "backward", "ms": 50}, [d(1, "backward")]),
        Scenario("zero3-hang", zero3, "hang", {"rank": 0}, ["hang:rank=0,step=10"]),
        Scenario("zero3-crash", zero3, "crash", {"rank": 0}, ["crash:rank=0,step=6"]),
        Scenario("pmp-delay-backward", pmp, "delay", {"rank": 1, "phase": "backward", "ms": 50}, [d(1, "backward")], quick=True),
        Scenario("pmp-slow-data", pmp, "delay", {"rank": 0, "phase": "data", "ms": 50}, ["slow-data:rank=0,ms=50"]),
        Scenario("pmp-hang", pmp, "hang", {"rank": 1}, ["hang:rank=1,step=10"]),
        Scenario("pmp-crash", pmp, "crash", {"rank": 0}, ["crash:rank=0,step=6"]),
        Scenario("hsdp-delay-backward", hsdp, "delay", {"rank": 3, "phase": "backward", "ms": 100}, [d(3, "backward", 100)],
                 world=4),
        Scenario("pp-dp-hang", pp_dp, "hang", {"rank": 2}, ["hang:rank=2,step=10"], world=4),
        Scenario("netns-ddp-delay", ddp, "delay", {"rank": 1, "phase": "backward", "ms": 50}, [d(1, "backward")], netns=True),
        Scenario("netns-ddp-hang", ddp, "hang", {"rank": 1}, ["hang:rank=1,step=10"], netns=True),
        Scenario("netns-ddp-crash", ddp, "crash", {"rank": 1}, ["crash:rank=1,step=6"], netns=True),
        Scenario("netns-ddp-link-down", ddp, "link-down", {}, netns=True, steps=60),
        Scenario("netns-zero3-link-down", zero3, "link-down", {}, netns=True, steps=60),
        Scenario("netns-pmp-link-down", pmp, "link-down", {}, netns=True, steps=60),
        Scenario("netns-ddp-slow-side", ddp, "slow-side", {}, netns=True, steps=4),
        Scenario("elastic-agent-killed", ddp, "agent-killed", {}, world=1, steps=17),
        Scenario("elastic-agent-returns", ddp, "agent-returns", {}, world=2, steps=29),
    ]
    return out


# --- running ----------------------------------------------------------------

class Run:
    """One ddpbench process (or one rank of a pair), its output lines timestamped as they arrive."""

    def __init__(self, cmd, env=None):
        self.start = time.monotonic()
        self.lines = []  # (seconds since start, text)
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
                                     start_new_session=True)
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self):
        for line in self.proc.stdout:
            self.lines.append((time.monotonic() - self.start, line.rstrip("\n")))

    def wait(self, limit_s):
        try:
            rc = self.proc.wait(timeout=limit_s)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, 9)
            self.proc.wait()
            rc = None  # past its limit
        self.reader.join(timeout=5)
        self.elapsed = time.monotonic() - self.start
        return rc

    def first(self, pattern):
        for t, line in self.lines:
            if re.search(pattern, line):
                return t, line
        return None, None

    def tail(self, n=12):
        return "\n".join(line for _, line in self.lines[-n:])


class Pair:
    """Two network namespaces joined by a veth pair: two hosts on one machine."""

    def __init__(self, tag):
        self.na, self.nb = f"chA{tag}", f"chB{tag}"
        self.va, self.vb = f"chva{tag}", f"chvb{tag}"
        net = f"10.215.{tag % 250 + 1}"
        self.addr_a, self.addr_b = net + ".1", net + ".2"
        self.port = 29600
        sh = lambda *a: subprocess.run(a, check=True, capture_output=True)
        for n in (self.na, self.nb):
            sh("ip", "netns", "add", n)
        sh("ip", "link", "add", self.va, "type", "veth", "peer", "name", self.vb)
        for ns, dev, addr in ((self.na, self.va, self.addr_a), (self.nb, self.vb, self.addr_b)):
            sh("ip", "link", "set", dev, "netns", ns)
            sh("ip", "-n", ns, "addr", "add", addr + "/24", "dev", dev)
            sh("ip", "-n", ns, "link", "set", "lo", "up")
            sh("ip", "-n", ns, "link", "set", dev, "up")

    def ranks(self, binary, flags):
        self.port += 1
        runs = []
        for rank, ns, dev in ((0, self.na, self.va), (1, self.nb, self.vb)):
            env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")}
            env.update(RANK=str(rank), WORLD_SIZE="2", MASTER_ADDR=self.addr_a, MASTER_PORT=str(self.port),
                       GLOO_SOCKET_IFNAME=dev, LOCAL_RANK="0", LOCAL_WORLD_SIZE="1")
            runs.append(Run(["ip", "netns", "exec", ns, binary] + flags, env))
        return runs

    def link(self, up):
        subprocess.run(["ip", "-n", self.nb, "link", "set", self.vb, "up" if up else "down"], check=True)
        if up:
            for _ in range(100):
                ok = subprocess.run(["ip", "netns", "exec", self.nb, "ping", "-c1", "-W1", self.addr_a],
                                    capture_output=True).returncode == 0
                if ok:
                    return
                time.sleep(0.1)

    def shape(self, rate):
        subprocess.run(["ip", "netns", "exec", self.nb, "tc", "qdisc", "replace", "dev", self.vb, "root", "tbf",
                        "rate", rate, "burst", "32kbit", "latency", "400ms"], check=True)

    def unshape(self):
        subprocess.run(["ip", "netns", "exec", self.nb, "tc", "qdisc", "del", "dev", self.vb, "root"],
                       capture_output=True)

    def remove(self):
        for n in (self.na, self.nb):
            subprocess.run(["ip", "netns", "del", n], capture_output=True)


def pair_or_reason(tag):
    if os.geteuid() != 0:
        return None, "needs root (network namespaces)"
    if not shutil.which("ip") or not shutil.which("tc"):
        return None, "needs iproute2 (ip, tc)"
    try:
        return Pair(tag), ""
    except subprocess.CalledProcessError as e:
        return None, f"cannot make network namespaces here: {e.stderr.decode(errors='replace').strip()}"


# --- checking ----------------------------------------------------------------

def snapshot_state(snap_dir):
    """The newest snapshot: 'intact step N', 'none', or what is wrong with it."""
    manifests = glob.glob(os.path.join(snap_dir, "*-step*.json"))
    if not manifests:
        return "none", True
    newest = max(manifests, key=snapshot_audit.step_of)
    problem = snapshot_audit.manifest_problem(newest)
    return (problem, False) if problem else (f"intact step {snapshot_audit.step_of(newest)}", True)


def records_ok(out_csv, world):
    """Every rank's flight record written and parseable."""
    base = os.path.splitext(out_csv)[0] + ".flight"
    bad = []
    for r in range(world):
        path = os.path.join(base, f"rank-{r}.json")
        try:
            rec = json.load(open(path))
            if rec.get("format") != "ddpbench flight record" or rec.get("rank") != r:
                bad.append(f"rank {r}: not a record")
        except (OSError, ValueError) as e:
            bad.append(f"rank {r}: {e.__class__.__name__}")
    return bad


def row_of(out_csv):
    try:
        rows = list(csv.DictReader(open(out_csv)))
    except OSError:
        return None
    return rows[-1] if rows else None


@dataclass
class Outcome:
    named: str
    seconds: float
    ok: bool
    why: str = ""


def check_delay(sc, rcs, run0, out_csv):
    row = row_of(out_csv)
    if any(rc != 0 for rc in rcs) or row is None:
        return Outcome("no row", run0.elapsed, False, f"exit {rcs}: {run0.tail()}")
    rank, phase, ms = row.get("straggler_rank", ""), row.get("straggler_phase", ""), row.get("straggler_ms", "")
    named = f"straggler {rank} {phase} {ms} ms".strip()
    if sc.fault == "none" or sc.fault == "slow-side":
        return Outcome(named + f" (noise {row.get('straggler_noise_ms')} ms)", run0.elapsed, rank == "none")
    want = sc.expect
    ok = rank == str(want["rank"]) and phase == want["phase"]
    ok = ok and (not TIMING or abs(float(ms or 0) - want["ms"]) <= 0.2 * want["ms"])
    return Outcome(named, run0.elapsed, ok)


def check_stopped(sc, rcs, runs, out_csv, limit_s):
    """A hang or a crash: exit 7 on the rank that names it, the cause line, in time."""
    rank = sc.expect["rank"]
    pattern = (rf"rank {rank} (never entered|did not answer) ((collective|send|receive) #\d+|its next collective)"
               if sc.fault == "hang"
               else rf"rank {rank} (\(pid \d+\) was killed by signal 9|never entered|did not answer)")
    fired = [r.first(r"--inject=.*: (hanging|crashing) now")[0] for r in runs]
    fired = min([t for t in fired if t is not None], default=None)
    named_at, line = None, None
    for r in runs:
        t, l = r.first(pattern)
        if t is not None and (named_at is None or t < named_at):
            named_at, line = t, l
    if line is None or fired is None:
        tails = "\n".join(r.tail() for r in runs)
        return Outcome("not named", max(r.elapsed for r in runs), False, f"exit {rcs}\n{tails}")
    seconds = named_at - fired
    named = re.sub(r"^ddpbench: error: ", "", line)[:110]
    ok = all(rc is not None for rc in rcs) and 7 in rcs and row_of(out_csv) is None
    bound = CRASH_NAME_S if sc.fault == "crash" else TIMEOUT_S + 10
    ok = ok and (not TIMING or seconds <= bound)
    why = "" if ok else f"exit {rcs}, {seconds:.1f} s (bound {bound} s)"
    if sc.fault == "hang":
        bad = records_ok(out_csv, sc.world)
        ok, why = ok and not bad, why + ("; records: " + ", ".join(bad) if bad else "")
    return Outcome(named, seconds, ok, why)


# --- scenarios ----------------------------------------------------------------

def flags_of(sc, tmp):
    out_csv = os.path.join(tmp, sc.name + ".csv")
    flags = sc.strategy + SMALL + [f"--steps={sc.steps}", f"--out={out_csv}"] + [f"--inject={i}" for i in sc.inject]
    if sc.world > (os.cpu_count() or 1):
        flags.append("--oversubscribe")  # 4 ranks on a 2-core machine: slower, still named
    snap = None
    if sc.fault in ("hang", "crash", "link-down"):
        snap = os.path.join(tmp, sc.name + ".snap")
        flags += [f"--timeout={TIMEOUT_S}", f"--snapshot-dir={snap}", "--snapshot-every=2"]
    return flags, out_csv, snap


def run_loopback(binary, sc, tmp):
    flags, out_csv, snap = flags_of(sc, tmp)
    run = Run([binary, f"--gpus={sc.world}"] + flags)
    limit = TIMEOUT_S + 40 if sc.fault in ("hang", "crash") else 300
    rc = run.wait(limit)
    if sc.fault in ("hang", "crash"):
        out = check_stopped(sc, [rc], [run], out_csv, limit)
    else:
        out = check_delay(sc, [rc], run, out_csv)
    return out, snap


def run_netns(binary, sc, tmp, pair):
    flags, out_csv, snap = flags_of(sc, tmp)
    if sc.fault == "link-down":
        return link_down(binary, sc, flags, out_csv, snap, pair)
    if sc.fault == "slow-side":
        pair.shape("20mbit")
    runs = pair.ranks(binary, flags)
    try:
        rcs = [r.wait(TIMEOUT_S + 60 if sc.fault in ("hang", "crash") else 300) for r in runs]
    finally:
        pair.unshape()
    if sc.fault in ("hang", "crash"):
        return check_stopped(sc, rcs, runs, out_csv, TIMEOUT_S + 60), snap
    return check_delay(sc, rcs, runs[0], out_csv), snap


def link_down(binary, sc, flags, out_csv, snap, pair):
    """Cut the link once a snapshot exists; the run ends in time with the cause; --resume completes."""
    runs = pair.ranks(binary, flags + ["--inject=delay:rank=0,phase=data,ms=100"])
    deadline = time.monotonic() + 60
    while not glob.glob(os.path.join(snap, "*-step*.json")) and time.monotonic() < deadline:
        if any(r.proc.poll() is not None for r in runs):
            break
        time.sleep(0.05)
    cut = time.monotonic()
    pair.link(False)
    rcs = [r.wait(TIMEOUT_S + 30) for r in runs]
    ended = max(r.start + r.elapsed for r in runs) - cut
    pair.link(True)
    cause = None
    for r in runs:
        _, line = r.first(r"ddpbench: error: (every rank of|rank \d+ (never entered|did not answer)|.*silent)")
        cause = cause or line
    resumed = pair.ranks(binary, flags + ["--resume"])
    resume_rcs = [r.wait(120) for r in resumed]
    row = row_of(out_csv)
    ok = (all(rc not in (0, None) for rc in rcs) and ended <= TIMEOUT_S + 15 and cause is not None
          and resume_rcs == [0, 0] and row is not None and row.get("restarts") == "1")
    named = re.sub(r"^ddpbench: error: ", "", cause or "no cause line")[:90] + (
        f"; resumed from step {row.get('resumed_from_step')}" if row else "; resume wrote no row")
    why = "" if ok else f"exit {rcs} in {ended:.1f} s, resume exit {resume_rcs}\n" + "\n".join(
        r.tail() for r in runs + resumed)
    return Outcome(named, ended, ok, why), snap


def run_elastic(binary, sc, tmp):
    """Two torchrun agents, one killed (and, for agent-returns, a third started): see elastic_drill."""
    work = os.path.join(tmp, sc.name)
    os.makedirs(work)
    flags = sc.strategy + SMALL + [f"--steps={sc.steps}", "--snapshot-every=3"]
    d = elastic_drill.run(binary, flags, work, grow=sc.fault == "agent-returns")
    named = (f"worlds {d.row['worlds']}, restarts {d.row['restarts']}, lost {d.row['steps_lost']} step(s)"
             if d.row else "no row")
    seconds = d.grown_s if d.grow else d.recovered_s
    why = "; ".join(d.problems) + ("\n" + elastic_drill.log_tails(work, 6) if d.problems else "")
    return Outcome(named, seconds if seconds is not None else -1, not d.problems, why), os.path.join(work, "snap")


def skip_reason(sc, pair_reason):
    """Why this machine cannot run the scenario ("" when it can)."""
    if sc.netns:
        return pair_reason
    if sc.fault.startswith("agent-") and not elastic_drill.torchrun_path():
        return "needs torchrun (the repository's .venv or PATH)"
    return ""


def expected_text(sc):
    e = sc.expect
    return {"delay": lambda: f"straggler {e['rank']} {e['phase']} ~{e['ms']} ms",
            "none": lambda: "no straggler",
            "slow-side": lambda: "no straggler (the link is slow, not a rank)",
            "hang": lambda: f"rank {e['rank']} never entered collective k",
            "crash": lambda: f"rank {e['rank']} killed (signal 9)",
            "link-down": lambda: "link named, snapshot intact, --resume completes",
            "agent-killed": lambda: "survivor goes on, 1 rank, newest snapshot",
            "agent-returns": lambda: "grows back to 2 ranks, newest snapshot"}[sc.fault]()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--binary", required=True, help="the ddpbench binary")
    ap.add_argument("--quick", action="store_true", help="the short loopback subset (ctest)")
    ap.add_argument("--only", default="", help="comma list of scenario names")
    ap.add_argument("--csv", default="", help="also write the lines as CSV here")
    args = ap.parse_args()
    global TIMING
    TIMING = not args.quick
    if not os.access(args.binary, os.X_OK):
        sys.exit(f"chaos.py: --binary={args.binary}: not an executable file")
    chosen = [s for s in scenarios() if (not args.quick or s.quick)]
    if args.only:
        names = [n for n in args.only.split(",") if n]
        unknown = [n for n in names if n not in {s.name for s in scenarios()}]
        if unknown:
            sys.exit(f"chaos.py: --only: unknown scenario(s) {', '.join(unknown)}; accepted: "
                     + ", ".join(s.name for s in scenarios()))
        chosen = [s for s in chosen if s.name in names]
    tmp = tempfile.mkdtemp(prefix="ddpbench-chaos-")
    pair, pair_reason = (None, "")
    if any(s.netns for s in chosen):
        pair, pair_reason = pair_or_reason(os.getpid())
    lines, failed = [], 0
    header = ("scenario", "expected", "named", "seconds", "snapshot", "result")
    print("{:<24} {:<40} {:<60} {:>7}  {:<16} {}".format(*header), flush=True)
    try:
        for sc in chosen:
            reason = skip_reason(sc, pair_reason if pair is None else "")
            if reason:
                print(f"{sc.name:<24} skipped: {reason}", flush=True)
                lines.append((sc.name, expected_text(sc), "skipped: " + reason, "", "", "skipped"))
                continue
            if sc.netns:
                out, snap = run_netns(args.binary, sc, tmp, pair)
            elif sc.fault.startswith("agent-"):
                out, snap = run_elastic(args.binary, sc, tmp)
            else:
                out, snap = run_loopback(args.binary, sc, tmp)
            state, intact = snapshot_state(snap) if snap else ("-", True)
            ok = out.ok and intact
            failed += not ok
            line = (sc.name, expected_text(sc), out.named, f"{out.seconds:.1f}", state, "ok" if ok else "FAIL")
            lines.append(line)
            print("{:<24} {:<40} {:<60} {:>7}  {:<16} {}".format(*line), flush=True)
            if not ok and out.why:
                print("    " + out.why.replace("\n", "\n    "), flush=True)
    finally:
        if pair:
            pair.remove()
        shutil.rmtree(tmp, ignore_errors=True)
    if args.csv:
        with open(args.csv, "w", newline="") as f:
            w = csv.writer(f)
            w.writerow(header)
            w.writerows(lines)
    ran = sum(1 for l in lines if l[5] != "skipped")
    print(f"{ran - failed} of {ran} scenarios named as expected"
          + (f", {len(lines) - ran} skipped" if len(lines) > ran else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
