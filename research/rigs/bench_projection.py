#!/usr/bin/env python3
"""Validates the projection (docs/projection.md) against real runs over links
of known speed on this machine. Not a test: it measures. Needs root (network
namespaces, tc) and the iproute2 tools.

Two ranks of ddpbench, one in each of two network namespaces joined by a veth
pair (as tests/e2e/two_hosts_netns.sh does), join with the environment
launcher (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT, GLOO_SOCKET_IFNAME bound
to the veth) and train over the pair. Both ends of the pair are shaped with
tc's token bucket filter (`tc qdisc replace dev VETH root tbf rate R burst B
latency L`; this kernel has no netem), so each direction carries at most R.
The burst is max(R / HZ, 32 KiB) bytes (HZ from /proc/config.gz): a smaller
bucket does not reach R at 2 Gbit/s here. The latency (--tbf-latency, 100 ms)
bounds tbf's queue; at 20 ms it dropped packets at 100 Mbit/s. What the link achieves is measured,
not assumed: a Python socket probe sends TCP both ways at once across the
namespaces for --probe-seconds and counts the bytes received after the first
0.5 s (goodput: about 0.957 R at MTU 1500, the rest is Ethernet/IP/TCP
headers), each time a rate is applied.

For each rate and strategy, two ranks over the shaped pair; and on loopback
(no namespaces) `--gpus=1` and `--gpus=2` (spawned ranks) per strategy.
pmp-1f1b and pmp-zero-bubble run pmp with --stage-ranks (one stage per rank,
--chunks=4): each micro-batch's activations and gradients cross the pair;
on loopback they run at 2 ranks only.
Rounds are interleaved (bench_util.interleaved); the table gives the median
img/s per configuration and its min-max. Each measured configuration is
predicted by `ddpbench --project=PROFILE` (two nodes of one device joined by
`--inter=measured`, or one node of 1-2 devices with `--intra=measured`), from
profiles calibrated in every round (--calibrate-every; Profiles): on loopback
`ddpbench --calibrate=FILE --strategy=ddp WORKLOAD --gpus=2` (or --profile),
over each shaped link the same with its two ranks across the pair. A
configuration's prediction is the median of its rounds'; the error is
(predicted - measured) / measured. The goal: median |error| <= 10% per
strategy, none above 20%.

    .venv/bin/python research/rigs/bench_projection.py --rounds=3 \\
        --out=results/cpu-2core/projection/validation/cpu-2core-projection-validation.csv

--no-predict measures only (prediction columns empty). --pool=STAMP,STAMP
measures nothing: it judges the goal over runs already in --out together;
with --repredict it first predicts them again with this build from the profiles
each run stored, --set FIELD=VALUE changing a calibrated term in all of them
(what a change of the model would have said about runs already made).
"""
import argparse
import csv
import datetime
import gzip
import json
import math
import os
import re
import shlex
import signal
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))  # research/rigs/ -> the repository
from bench_util import interleaved, machine, write_results  # noqa: E402

DEFAULT_WORKLOAD = "--model=resnet18 --width=16 --image-size=32 --batch-size=32 --steps=300 --warmup=10 --no-eval"
# Each validated configuration: its ddpbench flags, the projection's flags for
# it, and the loopback rank counts it runs (pmp needs two stages: its stages
# on two ranks, each stage's activations and gradients sent over the link).
# pmp is cut between whole blocks, the units the projection models (--units=auto
# may cut inside a block: zero-bubble chose 10,8 half blocks here and ran 12%
# slower than at 6,4 whole blocks, 1873 against 2140 img/s).
PMP_CHUNKS = 4
CONFIGS = {
    "ddp": (["--strategy=ddp"], ["--strategies=ddp"], (1, 2)),
    "zero1": (["--strategy=zero1"], ["--strategies=zero1"], (1, 2)),
    "zero2": (["--strategy=zero2"], ["--strategies=zero2"], (1, 2)),
    "zero3": (["--strategy=zero3"], ["--strategies=zero3"], (1, 2)),
    **{f"pmp-{s}": (["--strategy=pmp", "--stage-ranks", f"--schedule={s}", f"--chunks={PMP_CHUNKS}", "--units=blocks"],
                    ["--strategies=pmp", f"--schedule={s}", f"--chunks={PMP_CHUNKS}"], (2,))
       for s in ("1f1b", "zero-bubble")},
}
STRATEGIES = tuple(CONFIGS)
DEFAULT_OUT = os.path.join("results", "cpu-2core", "projection", "validation", "cpu-2core-projection-validation.csv")
# The driver sets these itself; the workload may not.
RESERVED = ("--strategy", "--gpus", "--out", "--baseline", "--progress", "--calibrate", "--project", "--device",
            "--stage-ranks", "--schedule", "--chunks", "--units")
# An outer launcher's variables would change what ddpbench detects (as tests/e2e/lib/launch_common.sh).
LAUNCHER_ENV = re.compile(r"^(SLURM_|OMPI_|PMIX_|PMI_|TORCHELASTIC_)|^(RANK|LOCAL_RANK|WORLD_SIZE|LOCAL_WORLD_SIZE|"
                          r"GROUP_RANK|MASTER_ADDR|MASTER_PORT|DDPBENCH_LAUNCHER|GLOO_SOCKET_IFNAME)$")
RATE_UNITS = {"bit": 1.0, "kbit": 1e3, "mbit": 1e6, "gbit": 1e9}  # tc's: SI prefixes, bits per second
MIN_BURST = 32 * 1024
MASTER_PORT = 29500  # a fresh namespace has every port free
PROBE_SKIP_S = 0.5   # the probe's first half second (slow start, the full bucket) is not counted
GOAL_MEDIAN, GOAL_MAX = 10.0, 20.0
# What collectives and the computation cost each other: the all-reduce's at the profile's top
# level, and under the same names in its sharded_comm (all-gathers and reduce-scatters) where it has one.
COMM_TERMS = ("comm_compute_ms_per_call", "comm_compute_ms_per_mb", "comm_loaded_ms_per_call",
              "comm_loaded_ms_per_mb")
# Profile fields --set may change when --repredict predicts stored runs again: the
# calibrated terms a change of the model or of its calibration is tried against (COMM_TERMS
# in the profile's sharded_comm as well).
SETTABLE = COMM_TERMS + ("comm_wake_ms", "comm_core_latency_ms", "step_overhead_ms", "optimizer_ms_per_mb")

# Children alive now (Popen), killed with their process group on any exit.
LIVE = set()


# ---------------------------------------------------------------- rates, burst

def parse_rate(text):
    """'500mbit' -> 5e8 bits/s (tc's units: bit, kbit, mbit, gbit, SI prefixes)."""
    m = re.fullmatch(r"(\d+(?:\.\d+)?)(bit|kbit|mbit|gbit)", text.strip().lower())
    if not m or float(m.group(1)) <= 0:
        raise ValueError(f"{text!r}: expected a rate as tc writes it, e.g. 2gbit, 500mbit, 100mbit")
    return float(m.group(1)) * RATE_UNITS[m.group(2)]


def bw_arg(bits):
    """A rate for ddpbench's --inter bw=: 2e9 -> '2Gbit/s', 5e8 -> '500Mbit/s'."""
    if bits >= 1e9 and abs(bits / 1e9 - round(bits / 1e9, 3)) < 1e-9:
        return f"{bits / 1e9:g}Gbit/s"
    return f"{bits / 1e6:g}Mbit/s"


def kernel_hz():
    """(HZ, where it came from): CONFIG_HZ of the running kernel, else 250."""
    try:
        with gzip.open("/proc/config.gz", "rt") as f:
            for line in f:
                if line.startswith("CONFIG_HZ="):
                    return int(line.split("=", 1)[1]), "/proc/config.gz"
    except (OSError, ValueError):
        pass
    return 250, "assumed (no /proc/config.gz)"


def burst_bytes(bits, hz):
    """tbf's bucket: at least one timer tick of the rate (R / HZ), and 32 KiB."""
    return max(math.ceil(bits / 8 / hz), MIN_BURST)


# ---------------------------------------------------------------- processes

def launcher_free_env(extra=None):
    env = {k: v for k, v in os.environ.items() if not LAUNCHER_ENV.search(k)}
    env.update(extra or {})
    return env


def start(argv, log, env=None):
    p = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                         env=env or launcher_free_env(), start_new_session=True)
    LIVE.add(p)
    return p


def kill(p):
    """Kills a child we started and its process group (spawned ranks included)."""
    if p.poll() is None:
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            p.kill()
    try:
        p.wait(timeout=10)
    except subprocess.TimeoutExpired:
        pass
    LIVE.discard(p)


def wait_all(procs, timeout, what):
    """Waits for every process; the first failure or the deadline kills the rest and raises."""
    deadline = time.monotonic() + timeout
    while True:
        codes = [p.poll() for p in procs]
        bad = [(i, c) for i, c in enumerate(codes) if c not in (None, 0)]
        if bad or time.monotonic() > deadline:
            for p in procs:
                kill(p)
            why = f"exited {bad[0][1]} (process {bad[0][0]})" if bad else f"ran past {timeout:.0f} s"
            raise RuntimeError(f"{what}: {why}")
        if all(c == 0 for c in codes):
            for p in procs:
                LIVE.discard(p)
            return
        time.sleep(0.1)


def run(argv, what, timeout=120):
    """A short command (ip, tc, --project): its stdout, or an error naming it."""
    r = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=timeout,
                       stdin=subprocess.DEVNULL)
    if r.returncode != 0:
        raise RuntimeError(f"{what}: `{shlex.join(argv)}` exited {r.returncode}: {r.stderr.strip()[-2000:]}")
    return r.stdout


def tail(path, n=15):
    try:
        with open(path, errors="replace") as f:
            return "".join(f.readlines()[-n:])
    except OSError:
        return ""


def on_signal(sig, _frame):
    print(f"!! {signal.Signals(sig).name}: stopping; killing the runs and deleting the namespaces", file=sys.stderr,
          flush=True)
    raise SystemExit(128 + sig)  # unwinds through every finally: children killed, namespaces deleted


# ---------------------------------------------------------------- the link

PROBE = r"""
import json, socket, sys, time
mode, host, port, seconds, skip = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4]), float(sys.argv[5])
if mode == "recv":
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind((host, port)); s.listen(1); s.settimeout(seconds + 30)
    print("ready", flush=True)
    c, _ = s.accept(); c.settimeout(seconds + 30)
    buf = bytearray(1 << 20); t0 = None; n = 0; n_skip = 0; t_skip = None
    while True:
        k = c.recv_into(buf)
        now = time.monotonic()
        if not k:
            break
        if t0 is None:
            t0 = now
        n += k
        if t_skip is None and now - t0 >= skip:
            t_skip, n_skip = now, n
    print(json.dumps({"bytes": n - n_skip, "seconds": now - (t_skip or now)}), flush=True)
else:
    c = socket.create_connection((host, port), timeout=30)
    data = b"\0" * (1 << 20); end = time.monotonic() + seconds
    while time.monotonic() < end:
        c.sendall(data)
    c.close()
"""


class Link:
    """Two namespaces (A, B) joined by a veth pair, each with loopback and its end only."""

    def __init__(self, latency):
        pid = os.getpid()
        self.ns = (f"pjA{pid}", f"pjB{pid}")
        self.veth = (f"pjva{pid}", f"pjvb{pid}")  # interface names: at most 15 characters
        net = f"10.215.{pid % 250 + 1}"
        self.addr = (f"{net}.1", f"{net}.2")
        self.latency = latency
        self.hz, self.hz_source = kernel_hz()
        self.made = []
        self.rate = None
        self.tc = {}  # rate -> the tc command applied at each end

    def up(self):
        for n in self.ns:
            run(["ip", "netns", "add", n], "network namespace")
            self.made.append(n)
        run(["ip", "link", "add", self.veth[0], "type", "veth", "peer", "name", self.veth[1]], "veth pair")
        for i in (0, 1):
            run(["ip", "link", "set", self.veth[i], "netns", self.ns[i]], "veth into its namespace")
            run(["ip", "-n", self.ns[i], "addr", "add", f"{self.addr[i]}/24", "dev", self.veth[i]], "address")
            run(["ip", "-n", self.ns[i], "link", "set", "lo", "up"], "loopback up")
            run(["ip", "-n", self.ns[i], "link", "set", self.veth[i], "up"], "veth up")
        for i in (0, 1):
            names = sorted(line.split(": ")[1].split("@")[0]
                           for line in run(["ip", "-n", self.ns[i], "-o", "link", "show"], "links").splitlines())
            if names != sorted(["lo", self.veth[i]]):
                raise RuntimeError(f"namespace {self.ns[i]} has interfaces {names}")

    def down(self):
        for n in self.made:
            subprocess.run(["ip", "netns", "del", n], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.made = []
        # Only if it never moved into a namespace (deleting a namespace deletes its end and the peer).
        subprocess.run(["ip", "link", "del", self.veth[0]], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def tbf(self, rate):
        bits = parse_rate(rate)
        return f"rate {rate} burst {burst_bytes(bits, self.hz)} latency {self.latency}"

    def shape(self, rate):
        """tbf at both ends (each direction), replacing whatever shaped the pair before."""
        cmds = []
        for i in (0, 1):
            argv = ["tc", "-n", self.ns[i], "qdisc", "replace", "dev", self.veth[i], "root", "tbf",
                    *self.tbf(rate).split()]
            run(argv, f"shaping {self.veth[i]} to {rate}")
            cmds.append(shlex.join(argv))
        self.rate = rate
        self.tc[rate] = "; ".join(cmds)

    def exec_argv(self, i, argv, env=None):
        pre = ["ip", "netns", "exec", self.ns[i]]
        return pre + (["env", *[f"{k}={v}" for k, v in env.items()]] if env else []) + argv

    def counters(self):
        """Bytes each end has sent so far (A -> B, B -> A; retransmissions included) and the
        packets tbf has dropped at both ends together (a full queue: TCP resends them)."""
        sent, drops = [], 0
        for i in (0, 1):
            info = json.loads(run(["ip", "-n", self.ns[i], "-s", "-j", "link", "show", "dev", self.veth[i]], "stats"))
            sent.append(int(info[0]["stats64"]["tx"]["bytes"]))
            qdiscs = json.loads(run(["tc", "-n", self.ns[i], "-s", "-j", "qdisc", "show", "dev", self.veth[i]],
                                    "stats"))
            drops += sum(int(q.get("drops", 0)) for q in qdiscs)
        return sent[0], sent[1], drops

    def probe(self, seconds, tmp):
        """TCP goodput both ways at once (A -> B, B -> A), Mbit/s, after the first PROBE_SKIP_S."""
        port = (5201, 5202)  # B listens on 5201 for A's data, A on 5202 for B's
        recv, send = [], []
        try:
            for i, (listen, p) in enumerate(((1, port[0]), (0, port[1]))):
                argv = self.exec_argv(listen, [sys.executable, "-c", PROBE, "recv", self.addr[listen], str(p),
                                               str(seconds), str(PROBE_SKIP_S)])
                r = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                     start_new_session=True)
                LIVE.add(r)
                recv.append(r)
                if r.stdout.readline().strip() != "ready":
                    raise RuntimeError(f"probe receiver in {self.ns[listen]} did not start: {r.stderr.read()[-500:]}")
            for sender, (listen, p) in ((0, (1, port[0])), (1, (0, port[1]))):
                argv = self.exec_argv(sender, [sys.executable, "-c", PROBE, "send", self.addr[listen], str(p),
                                               str(seconds), str(PROBE_SKIP_S)])
                send.append(start(argv, subprocess.DEVNULL))
            wait_all(send, seconds + 30, "probe senders")
            rates = []
            for r in recv:
                out, err = r.communicate(timeout=30)
                LIVE.discard(r)
                x = json.loads(out.strip().splitlines()[-1])
                if x["seconds"] <= 0:
                    raise RuntimeError(f"probe: no data after the first {PROBE_SKIP_S} s: {err[-500:]}")
                rates.append(x["bytes"] * 8 / x["seconds"] / 1e6)
            return tuple(rates)
        finally:
            for p in recv + send:
                kill(p)


# ---------------------------------------------------------------- measuring

def read_row(path, what):
    with open(path) as f:
        rows = list(csv.DictReader(f))
    if len(rows) != 1:
        raise RuntimeError(f"{what}: expected one row in {path}, found {len(rows)}")
    return rows[0]


def launch_netns(a, link, argv, what, tmp):
    """`argv` as two ranks, one in each namespace, joined over the pair: (wall seconds, rank 0's command)."""
    procs, cmds, logs = [], [], []
    t0 = time.monotonic()
    for i in (0, 1):
        env = {"RANK": str(i), "WORLD_SIZE": "2", "MASTER_ADDR": link.addr[0], "MASTER_PORT": str(MASTER_PORT),
               "GLOO_SOCKET_IFNAME": link.veth[i]}
        full = link.exec_argv(i, argv, env)
        cmds.append(shlex.join(full))
        logs.append(os.path.join(tmp, f"netns-rank{i}.log"))
        with open(logs[-1], "w") as log:
            procs.append(start(full, log))
    try:
        wait_all(procs, a.run_timeout, f"{what} over {link.rate}")
    except RuntimeError as e:
        raise RuntimeError(f"{e}\n--- rank 0:\n{tail(logs[0])}--- rank 1:\n{tail(logs[1])}") from None
    return time.monotonic() - t0, cmds[0]


def measure_netns(a, link, strategy, tmp):
    """Two ranks over the shaped pair: (row, wall seconds, (bytes A->B, B->A, tbf drops), rank 0's command)."""
    out = os.path.join(tmp, f"netns-{strategy}.csv")
    if os.path.exists(out):
        os.remove(out)
    argv = [a.binary, *CONFIGS[strategy][0], *a.workload_args, "--progress=off", f"--out={out}"]
    before = link.counters()
    wall, cmd = launch_netns(a, link, argv, strategy, tmp)
    after = link.counters()
    return read_row(out, cmd), wall, tuple(x - y for x, y in zip(after, before)), cmd


def calibrate_netns(a, link, path, tmp):
    """ddpbench --calibrate with its two ranks across the shaped pair: the link's own profile
    (its all-reduce, reduce-scatter and all-gather fitted over the link itself)."""
    argv = [a.binary, f"--calibrate={path}", "--strategy=ddp", *a.workload_args, "--progress=off"]
    _, cmd = launch_netns(a, link, argv, "calibration", tmp)
    if not os.path.exists(path):
        raise RuntimeError(f"calibration wrote no profile to {path}: {cmd}")
    return cmd


def measure_loopback(a, strategy, ranks, tmp):
    out = os.path.join(tmp, f"loopback-{strategy}-{ranks}.csv")
    if os.path.exists(out):
        os.remove(out)
    argv = [a.binary, *CONFIGS[strategy][0], f"--gpus={ranks}", *a.workload_args, "--progress=off", f"--out={out}"]
    log = os.path.join(tmp, f"loopback-{strategy}-{ranks}.log")
    t0 = time.monotonic()
    with open(log, "w") as f:
        p = start(argv, f)
    try:
        wait_all([p], a.run_timeout, f"{strategy} on loopback, {ranks} rank(s)")
    except RuntimeError as e:
        raise RuntimeError(f"{e}\n{tail(log)}") from None
    return read_row(out, shlex.join(argv)), time.monotonic() - t0, shlex.join(argv)


# ---------------------------------------------------------------- predicting

def make_profile(a, path, tmp):
    """ddpbench --calibrate: the workload's unit times, optimizer and loopback link, as a profile."""
    argv = [a.binary, f"--calibrate={path}", "--strategy=ddp", *a.workload_args, "--gpus=2", "--progress=off"]
    log = os.path.join(tmp, "calibrate.log")
    with open(log, "w") as f:
        p = start(argv, f)
    try:
        wait_all([p], a.run_timeout, "calibration")
    except RuntimeError as e:
        raise RuntimeError(f"{e}: {shlex.join(argv)}\n{tail(log)}(--no-predict measures without predictions)") from None
    if not os.path.exists(path):
        raise RuntimeError(f"calibration wrote no profile to {path}: {shlex.join(argv)}\n{tail(log)}")
    return shlex.join(argv)


class Profiles:
    """The profiles the predictions come from, made where they are first needed: the
    loopback one (make_profile) and, with --predict-bw=calibrated, each shaped link's
    (calibrate_netns, its ranks across the pair). --calibrate-every=round makes them anew
    in every round, the round's runs predicted from its own: this VM's speed drifts by
    10-20% over minutes, and a profile made once carries one moment's speed into every
    prediction. once: made in the first round, kept for all (the files as before:
    OUT-profile-STAMP.json, OUT-profile-STAMP-RATE.json)."""

    def __init__(self, a, stamp, tmp):
        self.a, self.tmp = a, tmp
        self.per_round = a.calibrate_every == "round"
        compact = stamp.replace("-", "").replace(":", "")
        stem = os.path.splitext(a.out)[0]
        self.prefix = f"{stem}-profiles-{compact}" if self.per_round else f"{stem}-profile-{compact}"
        self.commands = {}  # path -> the command that made it

    def path(self, rnd, kind):
        if kind == "loopback" and self.a.profile:
            return self.a.profile
        if kind != "loopback" and self.a.predict_bw != "calibrated":
            return self.path(rnd, "loopback")
        suffix = "" if kind == "loopback" else f"-{kind}"
        if self.per_round:
            return os.path.join(self.prefix, f"r{rnd}{suffix}.json")
        return f"{self.prefix}{suffix}.json"

    def ensure(self, rnd, kind, link):
        """The profile for `kind` in round `rnd`, calibrated now if not yet made (a shaped
        link's with `link` shaped to it)."""
        path = self.path(rnd, kind)
        if path in self.commands or path == self.a.profile:
            return path
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        print(f"calibrating {'on loopback' if kind == 'loopback' else 'over ' + kind}: {path}", flush=True)
        self.commands[path] = (make_profile(self.a, path, self.tmp) if kind == "loopback"
                               else calibrate_netns(self.a, link, path, self.tmp))
        return path

    def note(self):
        a = self.a
        if a.profile:
            head = f"profile `{a.profile}` (--profile)"
        else:
            head = f"profile made on loopback by `{self.commands.get(self.path(0, 'loopback'), '')}`"
            if self.per_round:
                head += f", and one like it in every round (`{rel(self.prefix)}/r<round>.json`)"
        head += {
            "nominal": "; shaped links predicted from it with bw = the tbf rate",
            "achieved": "; shaped links predicted from it with bw = the probe median goodput",
            "calibrated": "; each shaped link predicted from a profile calibrated over it (`ddpbench --calibrate` "
                          "with its two ranks across the pair: the link's all-reduce, reduce-scatter, all-gather "
                          "and point-to-point measured there"
                          + ("; `r<round>-<rate>.json`)" if self.per_round else "; `...-<rate>.json`)")}[a.predict_bw]
        if self.per_round:
            head += ("; calibrated anew in every round (--calibrate-every=round), each round's runs predicted from "
                     "that round's profiles, the predicted figure the median over rounds (every round's in the "
                     "CSV's predicted_all)")
        return head


def predict_argv(a, profile, csv_path, link, strategy, ranks, bw_bits):
    """ddpbench --project for one measured configuration: two nodes of one device over the
    shaped link (bw = its rate, or bw_bits None: the link as its own profile measured it), or
    one node of `ranks` devices on loopback."""
    if link == "loopback":
        topo = ["--nodes=1", f"--gpus-per-node={ranks}", "--intra=measured"]
    else:
        inter = "measured" if bw_bits is None else f"measured,bw={bw_arg(bw_bits)}"
        topo = ["--nodes=2", "--gpus-per-node=1", f"--inter={inter}"]
    return [a.binary, f"--project={profile}", f"--project-csv={csv_path}", *CONFIGS[strategy][1], *topo]


def predict(a, profile, link, strategy, ranks, bw_bits, tmp):
    """(predicted img/s or None, the command). None: the projection has no row for it."""
    csv_path = os.path.join(tmp, "project.csv")
    argv = predict_argv(a, profile, csv_path, link, strategy, ranks, bw_bits)
    return projected_img_s(argv, csv_path, strategy, ranks), shlex.join(argv)


def projected_img_s(argv, csv_path, strategy, ranks):
    """Runs the projection `argv` (writing csv_path, an earlier table there removed first): the
    img/s of `strategy` at `ranks`, or None where its table has no such row."""
    if os.path.exists(csv_path):
        os.remove(csv_path)
    run(argv, "prediction")
    with open(csv_path) as f:
        projected = CONFIGS[strategy][1][0].split("=", 1)[1]
        rows = [r for r in csv.DictReader(f)
                if r.get("strategy") == projected and str(r.get("world", "")).strip() == str(ranks)
                and r.get("img_s", "").strip()]
    return float(rows[0]["img_s"]) if rows else None


def round_profile(path, rnd):
    """The profile round `rnd` of a stored run was predicted from. A row's predict_command
    names its last round's; a run calibrated in every round keeps them as
    ...-profiles-STAMP/r<round>[-<rate>].json, one calibrated once has one for all rounds."""
    if "-profiles-" not in path:
        return path
    return re.sub(r"([/\\]r)\d+((?:-[^/\\]+)?\.json)$", lambda m: f"{m.group(1)}{rnd}{m.group(2)}", path)


def settled_profile(a, path, tmp):
    """`path` (relative to the checkout as stored) with the fields --set gives; a copy in tmp
    when there are any. ValueError naming a profile that is missing or not JSON."""
    full = path if os.path.isabs(path) else os.path.join(ROOT, path)
    if not a.set:
        if not os.path.isfile(full):
            raise ValueError(f"{path}: no such profile (the run's predict_command names it)")
        return full
    try:
        with open(full) as f:
            profile = json.load(f)
    except (OSError, ValueError) as e:
        raise ValueError(f"{path}: not a readable profile ({e})") from None
    profile.update(a.set)
    if isinstance(profile.get("sharded_comm"), dict):  # the same terms of all-gathers and reduce-scatters
        profile["sharded_comm"].update((k, v) for k, v in a.set.items() if k in COMM_TERMS)
    copy = os.path.join(tmp, "profile.json")
    with open(copy, "w") as f:
        json.dump(profile, f)
    return copy


def predict_stored(a, row, tmp):
    """A row of --out predicted again by a.binary from its run's own profiles: its
    predict_command once per round with that round's profile (--set's fields set), the
    median kept as the run kept it; None where the row had no prediction."""
    argv = shlex.split(row.get("predict_command") or "")
    if not argv:
        return None
    csv_path = os.path.join(tmp, "project.csv")
    preds = []
    for rnd in range(int(row.get("rounds") or 1)):
        args = [a.binary]
        for x in argv[1:]:
            if x.startswith("--project="):
                x = "--project=" + settled_profile(a, round_profile(x.split("=", 1)[1], rnd), tmp)
            elif x.startswith("--project-csv="):
                x = "--project-csv=" + csv_path
            args.append(x)
        img = projected_img_s(args, csv_path, row["strategy"], row["ranks"])
        if img is not None:
            preds.append(img)
    return statistics.median(preds) if preds else None


def predict_runs(a, runs, probes, tmp):
    """Each run's prediction from the profile of its round and link (x["profile"]), into
    x["predicted"] (None where the projection has none or failed) and x["predict_command"];
    one projection per distinct (profile, configuration)."""
    done = {}
    for x in runs:
        kind, strategy, ranks = x["key"]
        bw = None
        if kind != "loopback" and a.predict_bw != "calibrated":
            bw = parse_rate(kind)
            if a.predict_bw == "achieved":
                bw = statistics.median(v for p in probes[kind] for v in p) * 1e6
        key = (x["profile"], x["key"])
        if key not in done:
            try:
                done[key] = predict(a, x["profile"], kind, strategy, ranks, bw, tmp)
            except (RuntimeError, OSError, ValueError, subprocess.TimeoutExpired) as e:
                print(f"!! prediction of {x['key']} from {x['profile']} failed: {e}", file=sys.stderr, flush=True)
                done[key] = (None, "")
        x["predicted"], x["predict_command"] = done[key]


# ---------------------------------------------------------------- the table

def fmt(v, spec=".1f"):
    return "" if v is None else format(v, spec)


def error_pct(predicted, measured):
    """(predicted - measured) / measured in %, as the CSV holds it; '' without a prediction."""
    return fmt((predicted - measured) / measured * 100) if predicted is not None else ""


def summarise(a, entries, runs, probes, link):
    """One row per (link, strategy, ranks); its prediction the median of its runs' (each
    from its round's profile: one value when calibrated once)."""
    rows = []
    for key in entries:
        kind, strategy, ranks = key
        mine = [x for x in runs if x["key"] == key]
        img = [x["img_s"] for x in mine]
        med = statistics.median(img)
        preds = [x["predicted"] for x in mine if x.get("predicted") is not None]
        pred = statistics.median(preds) if preds else None
        pred_cmd = next((x["predict_command"] for x in reversed(mine) if x.get("predict_command")), "")
        comm = [x["comm_ms"] for x in mine if x["comm_ms"] is not None]
        veth = [x["veth_mb_step"] for x in mine if x["veth_mb_step"] is not None]
        drops = [x["drops"] for x in mine if x["drops"] is not None]
        achieved = [v for p in probes.get(kind, []) for v in p]
        rows.append({
            "link": kind, "tbf": link.tbf(kind) if kind != "loopback" else "",
            "link_achieved_mbit_s": fmt(statistics.median(achieved)) if achieved else "",
            "link_achieved_min_max": f"{min(achieved):.1f}-{max(achieved):.1f}" if achieved else "",
            "strategy": strategy, "ranks": ranks, "rounds": len(img),
            "measured_img_s": f"{med:.2f}", "measured_min": f"{min(img):.2f}", "measured_max": f"{max(img):.2f}",
            "measured_all": ";".join(f"{v:.2f}" for v in img),
            "run_wall_s": f"{statistics.median(x['wall_s'] for x in mine):.1f}",
            "comm_ms": fmt(statistics.median(comm), ".2f") if comm else "",
            "veth_mb_per_step": fmt(statistics.median(veth), ".3f") if veth else "",
            "tbf_drops": fmt(statistics.median(drops), "g") if drops else "",
            "predicted_img_s": fmt(pred, ".2f"),
            "predicted_all": ";".join(f"{v:.2f}" for v in preds),
            "error_pct": error_pct(pred, med),
            "predict_bw": a.predict_bw if kind != "loopback" and pred is not None else "",
            "workload": a.workload, "command": mine[-1]["command"], "tc": link.tc.get(kind, ""),
            "predict_command": pred_cmd,
        })
    return rows


def goal_lines(a, rows):
    errs = {}
    for r in rows:
        if r["error_pct"] != "":
            errs.setdefault(r["strategy"], []).append(abs(float(r["error_pct"])))
    if not errs:
        why = "--no-predict" if a.no_predict else "no prediction came back"
        return [f"Goal (median |error| <= {GOAL_MEDIAN:g}% per strategy, none above {GOAL_MAX:g}%): "
                f"not evaluated ({why})."]
    lines = ["| strategy | configurations | median abs error % | max abs error % | goal |", "|---|---|---|---|---|"]
    met_all = True
    for s in a.strategies:
        e = errs.get(s)
        if not e:
            lines.append(f"| {s} | 0 | - | - | not evaluated |")
            met_all = False
            continue
        met = statistics.median(e) <= GOAL_MEDIAN and max(e) <= GOAL_MAX
        met_all &= met
        lines.append(f"| {s} | {len(e)} | {statistics.median(e):.1f} | {max(e):.1f} | {'met' if met else 'not met'} |")
    lines += ["", f"Goal (median |error| <= {GOAL_MEDIAN:g}% per strategy, none above {GOAL_MAX:g}%): "
                  f"**{'met' if met_all else 'not met'}**."]
    return lines


def pooled(a):
    """The goal judged over several runs already in --out (--pool): one error per configuration
    and run, so a strategy's median and largest error count every run alike. ValueError naming
    a timestamp that is not in the file, and the ones that are."""
    try:
        with open(a.out, newline="") as f:
            rows = list(csv.DictReader(f))
    except OSError as e:
        raise ValueError(f"--out={a.out}: {e.strerror}") from None
    stamps = sorted({r.get("timestamp", "") for r in rows})
    missing = [s for s in a.pool if s not in stamps]
    if missing:
        raise ValueError(f"--pool: {','.join(missing)} not a run in {a.out}; its runs: {', '.join(stamps) or 'none'}")
    rows = [r for r in rows if r["timestamp"] in a.pool]
    judged = argparse.Namespace(strategies=[s for s in STRATEGIES if any(r["strategy"] == s for r in rows)],
                                no_predict=False)
    head = [f"Runs pooled from {rel(a.out)}: {', '.join(a.pool)} ({len(rows)} configurations)."]
    if a.repredict:
        head += repredicted(a, rows)
    return head + [""] + goal_lines(judged, rows)


def repredicted(a, rows):
    """--repredict: every row's prediction and error replaced by predict_stored's; a line per row."""
    told = ", ".join(f"{k}={v:g}" for k, v in a.set.items())
    lines = [f"Predicted again by {rel(a.binary)} from each run's stored profiles"
             + (f", with {told}" if told else "") + ":", ""]
    with tempfile.TemporaryDirectory(prefix="bench_projection.") as tmp:
        for r in rows:
            if not r.get("measured_img_s"):
                continue  # nothing measured: nothing to compare with
            try:
                new = predict_stored(a, r, tmp)
            except (RuntimeError, OSError, subprocess.TimeoutExpired) as e:
                raise ValueError(f"{r['timestamp']} {r['link']} {r['strategy']}: {e}") from None
            measured = float(r["measured_img_s"])
            was = f"{r['predicted_img_s'] or '-'} ({r['error_pct'] or '-'}%)"
            r["predicted_img_s"], r["error_pct"] = fmt(new, ".2f"), error_pct(new, measured)
            lines.append(f"- {r['timestamp']} {r['link']} {r['strategy']} x{r['ranks']}: measured {measured:.1f}, "
                         f"as run {was}, now {r['predicted_img_s'] or '-'} ({r['error_pct'] or '-'}%)")
    return lines


def rel(path):
    """A path relative to the checkout when it is inside it, else as given."""
    return os.path.relpath(path, ROOT) if os.path.abspath(path).startswith(ROOT + os.sep) else path


def command_line():
    """How this driver was started."""
    return shlex.join([rel(sys.executable), rel(sys.argv[0]), *sys.argv[1:]])


def table(a, rows, link, stamp, profile_note):
    lines = [f"# Projection against runs over shaped links ({stamp})", "",
             f"machine: {machine()}", "",
             f"command: `{command_line()}`",
             "", f"workload: `{a.workload}`; {a.rounds} interleaved round(s), median per configuration (min-max).", ""]
    if a.rates:
        lines += [f"link: two network namespaces joined by a veth pair, tbf on both ends "
                  f"(burst = max(rate/HZ, 32 KiB), "
                  f"HZ={link.hz} from {link.hz_source}, latency {a.tbf_latency}); achieved = TCP goodput of a "
                  f"Python socket probe sending both ways at once for {a.probe_seconds:g} s, first {PROBE_SKIP_S} s "
                  f"not counted, each direction, every time the rate was applied: median (min-max).", ""]
    lines += [f"prediction: {profile_note}", "",
              "| link | achieved Mbit/s | strategy | ranks | measured img/s | predicted img/s | error % | "
              "run wall s | comm ms/step | veth MB/step | tbf drops |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        ach = f"{r['link_achieved_mbit_s']} ({r['link_achieved_min_max']})" if r["link_achieved_mbit_s"] else "-"
        each = [float(v) for v in r["predicted_all"].split(";") if v]
        pred = r["predicted_img_s"] or "-"
        if len(set(each)) > 1:
            pred += f" ({min(each):.2f}-{max(each):.2f})"
        lines.append(f"| {r['link']} | {ach} | {r['strategy']} | {r['ranks']} | {r['measured_img_s']} "
                     f"({r['measured_min']}-{r['measured_max']}) | {pred} | "
                     f"{r['error_pct'] or '-'} | {r['run_wall_s']} | {r['comm_ms'] or '-'} | "
                     f"{r['veth_mb_per_step'] or '-'} | {r['tbf_drops'] or '-'} |")
    lines += ["", "comm ms/step: the row's `communication_ms`; veth MB/step: bytes rank 0's end sent over the pair "
              "during the run (set-up and warm-up included; packets tbf dropped are not counted) / (steps + warm-up); "
              "tbf drops: packets both ends' tbf dropped during the run (its queue full), median over rounds.", ""]
    loop = {(r["strategy"], r["ranks"]): r for r in rows if r["link"] == "loopback"}
    pairs = [s for s in a.strategies if (s, 1) in loop and (s, 2) in loop]
    if pairs:
        lines += ["1 -> 2 ranks on loopback:", "", "| strategy | measured 2 ranks / 1 | predicted 2 ranks / 1 |",
                  "|---|---|---|"]
        for s in pairs:
            one, two = loop[(s, 1)], loop[(s, 2)]
            meas = float(two["measured_img_s"]) / float(one["measured_img_s"])
            pred = (f"{float(two['predicted_img_s']) / float(one['predicted_img_s']):.2f}x"
                    if one["predicted_img_s"] and two["predicted_img_s"] else "-")
            lines.append(f"| {s} | {meas:.2f}x | {pred} |")
        lines.append("")
    lines += goal_lines(a, rows)
    lines += ["", "Every configuration's exact commands (ddpbench, tc, the prediction) are in the CSV beside this "
              "file (`command`, `tc`, `predict_command`)."]
    return lines


# ---------------------------------------------------------------- main

def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--binary", default=os.path.join(ROOT, "build", "ddpbench"))
    p.add_argument("--rates", default="2gbit,500mbit,100mbit", help="tbf rates, comma-separated ('' for none)")
    p.add_argument("--strategies", default=",".join(STRATEGIES),
                   help="comma-separated subset of " + ",".join(STRATEGIES))
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--workload", default=DEFAULT_WORKLOAD, help="ddpbench flags of every run (default: %(default)s)")
    p.add_argument("--no-loopback", action="store_true", help="skip the 1 -> 2 ranks runs on loopback")
    p.add_argument("--profile", help="a --calibrate profile for the loopback predictions (default: calibrated as "
                                     "--calibrate-every says, beside --out)")
    p.add_argument("--calibrate-every", choices=("round", "once"), default="round",
                   help="round (default): the profiles calibrated anew in every round and each round's runs "
                        "predicted from its own (the VM's speed drifts over minutes); once: in the first round only")
    p.add_argument("--no-predict", action="store_true", help="measure only; the prediction columns stay empty")
    p.add_argument("--predict-bw", choices=("calibrated", "nominal", "achieved"), default="calibrated",
                   help="the shaped link's prediction: calibrated (default: a profile calibrated over that link, "
                        "its collectives fitted there), or the loopback profile with bw= the tbf rate (nominal) "
                        "or the probe's median goodput (achieved)")
    p.add_argument("--tbf-latency", default="100ms",
                   help="tbf's latency: the longest a packet may queue before tbf drops it "
                        "(default %(default)s: no drops here; at 20ms tbf dropped packets at 100mbit)")
    p.add_argument("--probe-seconds", type=float, default=4.0, help="length of each throughput probe")
    p.add_argument("--run-timeout", type=float, default=1200, help="seconds before one run is killed")
    p.add_argument("--out", default=os.path.join(ROOT, DEFAULT_OUT),
                   help="CSV, one row per configuration (appended); a .md table beside it")
    p.add_argument("--pool", metavar="STAMP,STAMP",
                   help="measure nothing: judge the goal over the rows of these runs of --out together (their "
                        "timestamp column), every configuration of every run one error, and print that table")
    p.add_argument("--repredict", action="store_true",
                   help="with --pool: predict every pooled row again with --binary from the profiles its run "
                        "stored (each round's, the median kept), and judge those predictions")
    p.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE",
                   help="with --repredict (implies it): the stored profiles with FIELD set to VALUE (ms, >= 0); "
                        "FIELD one of " + ", ".join(SETTABLE) + "; repeatable")
    a = p.parse_args(argv)
    a.set = parse_sets(p, a.set)
    a.repredict = a.repredict or bool(a.set)
    if a.pool is not None:
        a.pool = [x.strip() for x in a.pool.split(",") if x.strip()]
        if not a.pool:
            p.error("--pool: no run given; expected the timestamps of runs in --out, comma-separated")
        # It measures nothing: a measuring flag given with it would be silently ignored.
        given = [f"--{k.replace('_', '-')}" + ("" if isinstance(v, bool) else f"={v}") for k, v in vars(a).items()
                 if k not in ("pool", "out", "repredict", "set") and (k != "binary" or not a.repredict)
                 and v != p.get_default(k)]
        if given:
            p.error(f"--pool measures nothing, so {', '.join(given)} would change nothing; "
                    "accepted with --pool: --out, --repredict, --set, and --binary with --repredict")
        if a.repredict and not os.access(a.binary, os.X_OK):
            p.error(f"--binary={a.binary}: not an executable (build it with scripts/setup.sh ddpbench)")
        return a
    if a.repredict:
        p.error("--repredict" + (f" (--set={next(iter(a.set))}=...)" if a.set else "")
                + " predicts runs already in --out again: give them with --pool=STAMP,STAMP")
    try:
        a.rates = [r.strip().lower() for r in a.rates.split(",") if r.strip()]
        for r in a.rates:
            parse_rate(r)
    except ValueError as e:
        p.error(f"--rates: {e}")
    a.strategies = [s.strip() for s in a.strategies.split(",") if s.strip()]
    bad = [s for s in a.strategies if s not in STRATEGIES]
    if bad or not a.strategies:
        p.error(f"--strategies: {','.join(bad) or 'none given'} not accepted; accepted: {','.join(STRATEGIES)}")
    a.workload_args = shlex.split(a.workload)
    given = [x for x in a.workload_args if x.split("=", 1)[0] in RESERVED]
    if given:
        p.error(f"--workload: {' '.join(given)}: the driver sets {', '.join(RESERVED)} itself")
    if a.rounds < 1:
        p.error(f"--rounds={a.rounds}: expected an integer >= 1")
    if a.probe_seconds <= PROBE_SKIP_S:
        p.error(f"--probe-seconds={a.probe_seconds:g}: expected more than {PROBE_SKIP_S} s")
    if not a.rates and a.no_loopback:
        p.error("nothing to measure: no --rates and --no-loopback")
    if not os.access(a.binary, os.X_OK):
        p.error(f"--binary={a.binary}: not an executable (build it with scripts/setup.sh ddpbench)")
    if a.profile and not os.path.isfile(a.profile):
        p.error(f"--profile={a.profile}: no such file")
    if a.rates:
        if os.geteuid() != 0:
            p.error("shaped links need root (network namespaces, tc); --rates='' runs the loopback part alone")
        for tool in ("ip", "tc"):
            if subprocess.run(["sh", "-c", f"command -v {tool}"], stdout=subprocess.DEVNULL).returncode:
                p.error(f"{tool} not installed: Debian's iproute2 (scripts/setup.sh installs it)")
    return a


def parse_sets(p, given):
    """--set FIELD=VALUE, each: {FIELD: VALUE}; argparse's error naming a bad one."""
    out = {}
    for text in given:
        field, eq, value = text.partition("=")
        if field not in SETTABLE:
            p.error(f"--set={text}: {field or 'no field'} is not a profile field --set changes; "
                    f"accepted: {', '.join(SETTABLE)}")
        try:
            v = float(value) if eq else float("nan")
        except ValueError:
            v = float("nan")
        if not math.isfinite(v) or v < 0:
            p.error(f"--set={text}: {value or 'no value'} is not a number of ms >= 0")
        out[field] = v
    return out


def main():
    a = parse_args()
    if a.pool is not None:
        try:
            print("\n".join(pooled(a)))
        except ValueError as e:
            print(f"bench_projection.py: {e}", file=sys.stderr)
            sys.exit(2)
        return
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        if signal.getsignal(sig) != signal.SIG_IGN:  # nohup's SIGHUP, a background job's SIGINT stay ignored
            signal.signal(sig, on_signal)
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    entries = [(rate, s, 2) for rate in a.rates for s in a.strategies]
    if not a.no_loopback:
        entries += [("loopback", s, n) for s in a.strategies for n in CONFIGS[s][2]]
    link = Link(a.tbf_latency)
    probes = {}  # rate -> [(A->B, B->A) Mbit/s]
    with tempfile.TemporaryDirectory(prefix="bench_projection.") as tmp:
        try:
            profiles = Profiles(a, stamp, tmp)
            if not a.no_predict:
                # Fail before the long measurement if the projection cannot run at all.
                predict(a, profiles.ensure(0, "loopback", link), "loopback", a.strategies[0], 2, None, tmp)
            if a.rates:
                link.up()
            calls = [0]
            probed = set()

            def one(key):
                kind, strategy, ranks = key
                rnd = calls[0] // len(entries)
                calls[0] += 1
                if not a.no_predict:
                    profiles.ensure(rnd, "loopback", link)  # at the round's first run
                if kind != "loopback":
                    if link.rate != kind:
                        link.shape(kind)
                    if (rnd, kind) not in probed:  # every rate's goodput, once a round
                        probed.add((rnd, kind))
                        ab = link.probe(a.probe_seconds, tmp)
                        probes.setdefault(kind, []).append(ab)
                        print(f"link {kind:8s} ({link.tbf(kind)}): achieved {ab[0]:.1f} / {ab[1]:.1f} Mbit/s "
                              f"(A->B / B->A)", flush=True)
                    if not a.no_predict:
                        profiles.ensure(rnd, kind, link)
                    row, wall, veth, cmd = measure_netns(a, link, strategy, tmp)
                    steps = int(row["steps"]) + int(row["warmup"] or 0)
                    veth_mb, drops = veth[0] / 1e6 / steps, veth[2]
                else:
                    row, wall, cmd = measure_loopback(a, strategy, ranks, tmp)
                    veth_mb, drops = None, None
                img = float(row["throughput_img_s"])
                comm = float(row["communication_ms"]) if row.get("communication_ms") else None
                print(f"{kind:8s} {strategy:6s} {ranks} rank(s): {img:8.1f} img/s, {wall:6.1f} s wall"
                      + (f", comm {comm:.1f} ms/step" if comm is not None else "")
                      + (f", veth {veth_mb:.3f} MB/step, tbf dropped {drops} packets" if veth_mb is not None else ""),
                      flush=True)
                return {"img_s": img, "wall_s": wall, "comm_ms": comm, "veth_mb_step": veth_mb, "drops": drops,
                        "command": cmd, "profile": None if a.no_predict else profiles.path(rnd, kind)}

            runs = [{"round": r, "key": key, **res} for r, key, res in interleaved(entries, a.rounds, one)]

            if not a.no_predict:
                predict_runs(a, runs, probes, tmp)
        finally:  # also on an error or a signal (SIGINT, SIGTERM, SIGHUP): no child, namespace or veth outlives us
            for p in list(LIVE):
                kill(p)
            link.down()
    rows = summarise(a, entries, runs, probes, link)
    lines = table(a, rows, link, stamp, "--no-predict: none" if a.no_predict else profiles.note())
    print("\n".join(lines))
    if a.out:
        os.makedirs(os.path.dirname(os.path.abspath(a.out)), exist_ok=True)
        write_results(a.out, rows, stamp, lines)
        print(f"wrote {a.out} and {os.path.splitext(a.out)[0]}.md")


if __name__ == "__main__":
    main()
