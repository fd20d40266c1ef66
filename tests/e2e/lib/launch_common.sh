# Shared by tests/e2e/launch_*.sh and two_hosts_netns.sh; sourced, not a test
# (tests/CMakeLists.txt registers only tests/e2e/*.sh). Expects BIN, SRC, TMP.
PY="$SRC/.venv/bin/python"; [[ -x "$PY" ]] || PY=python3
fail() { echo "FAIL: $*"; exit 1; }
skip() { echo "SKIP: $*"; exit 77; }
# A command that fails outside a check (set -e) says where.
trap 'rc_=$?; [[ $- == *e* ]] && echo "FAIL: ${BASH_SOURCE[0]##*/} line $LINENO: a command exited $rc_"' ERR

# The issue's tiny DDP workload; each run gets its own --out.
WORK=(--strategy=ddp --device=cpu --small-input --width=8 --image-size=16 --batch-size=16 --steps=4
      --warmup=1 --verify --progress=off)
export OMP_NUM_THREADS=1

# Variables of an outer launcher (ctest run inside a Slurm job, an mpirun or a
# torchrun) would change what ddpbench detects: the test's launcher alone sets them.
clear_launcher_env() {
  local v
  for v in $(compgen -e); do
    case "$v" in
      SLURM_*|OMPI_*|PMIX_*|TORCHELASTIC_*|RANK|LOCAL_RANK|WORLD_SIZE|LOCAL_WORLD_SIZE|GROUP_RANK|\
      MASTER_ADDR|MASTER_PORT|DDPBENCH_LAUNCHER|GLOO_SOCKET_IFNAME) unset "$v" ;;
    esac
  done
}

# A TCP port that is free now (the kernel's pick).
free_port() { "$PY" -c 'import socket; s = socket.socket(); s.bind(("", 0)); print(s.getsockname()[1])'; }

# check_row CSV LAUNCHER: exactly one row (only rank 0 writes), a 2-rank DDP
# run under LAUNCHER that matches the single-device run (--verify).
check_row() {
  printf '[+%3ds] ' "$SECONDS"
  "$PY" - "$1" "$2" <<'PYEOF' || fail "row check of $1 failed (launcher $2)"
import csv, sys
path, launcher = sys.argv[1:]
rows = list(csv.DictReader(open(path)))
assert len(rows) == 1, f"want exactly 1 row, got {len(rows)}"
r = rows[0]
want = {"strategy": "ddp", "launcher": launcher, "world_size": "2", "gpus": "2", "device": "cpu",
        "per_device_batch": "16", "global_batch": "32", "parity_ok": "true"}
for k, v in want.items():
    assert r[k] == v, f"{k}={r[k]!r}, want {v!r}"
assert float(r["parity_max_abs_diff"]) <= 1e-10, r["parity_max_abs_diff"]
assert len(r["throughput_per_rank_img_s"].split("/")) == 2, r["throughput_per_rank_img_s"]
assert float(r["throughput_img_s"]) > 0 and float(r["communication_ms"]) > 0, r
print(f"row ok: launcher={launcher} world_size=2 gpus=2 parity_ok=true "
      f"parity_max_abs_diff={r['parity_max_abs_diff']} throughput={r['throughput_img_s']} img/s")
PYEOF
}

# Every descendant of a process.
descendants() {
  local c
  for c in $(pgrep -P "$1" 2>/dev/null); do echo "$c"; descendants "$c"; done
}
# Kills a process and its descendants (found first, so none is reparented away).
kill_tree() {
  local pids
  pids="$(descendants "$1") $1"
  kill -KILL $pids 2>/dev/null || true
}
# Kills every background job of this shell, with its descendants (trap
# clean-up; never fails, as it runs under set -e).
kill_children() {
  local c
  {
    for c in $(jobs -p); do kill_tree "$c"; done
    for c in $(jobs -p); do wait "$c" || true; done
  } 2>/dev/null  # no "Killed" notices
}

# The ddpbench process whose environment has NAME=VALUE, among a set of pids.
pid_with_env() {  # NAME=VALUE pid...
  local want="$1" p; shift
  for p in "$@"; do
    [[ "$(cat "/proc/$p/comm" 2>/dev/null)" == ddpbench ]] || continue
    tr '\0' '\n' < "/proc/$p/environ" 2>/dev/null | grep -qx "$want" && { echo "$p"; return 0; }
  done
  return 1
}

# Waits (bounded) until LOG shows both ranks joined the process group, while
# the launcher (background job PID) runs.
wait_joined() {  # log seconds pid
  local i
  for ((i = 0; i < $2 * 10; i++)); do
    [[ $(grep -c "joined 2 ranks" "$1" 2>/dev/null) -ge 2 ]] && return 0
    running "$3" || fail "the launcher ended before both ranks joined: $(tail -n 30 "$1")"
    sleep 0.1
  done
  fail "the ranks did not join within $2 s: $(tail -n 30 "$1")"
}

# Waits (bounded) for background job PID; sets RC. Fails if it is still alive.
wait_pid() {  # pid seconds what
  local i
  for ((i = 0; i < $2 * 10; i++)); do running "$1" || break; sleep 0.1; done
  if running "$1"; then kill_tree "$1"; fail "$3: still running after $2 s"; fi
  set +e; wait "$1"; RC=$?; set -e
}

# Whether PID runs (a zombie waiting for init to reap it does not).
running() {
  local state
  state="$(awk '{print $3}' "/proc/$1/stat" 2>/dev/null)" || return 1
  [[ -n "$state" && "$state" != Z && "$state" != X ]]
}
# Fails unless PID is gone within a few seconds (a launcher's grace period).
gone_soon() {  # pid what
  local i
  for ((i = 0; i < 100; i++)); do running "$1" || return 0; sleep 0.1; done
  kill -KILL "$1" 2>/dev/null || true
  fail "$2 (pid $1) is still running 10 s after its launcher exited"
}

# Kills rank 1 (pid VICTIM) of the run whose launcher is $JOB, writing to
# $TMP/killed.log and $TMP/killed.csv: the launcher must fail (not time out)
# within 60 s and report it (REPORT, a grep pattern), no row may be written,
# and rank 0 (pid SURVIVOR) must be gone soon after.
expect_rank1_kill_fails_run() {  # launcher-name victim survivor report-pattern
  local name="$1" victim="$2" survivor="$3" report="$4" start
  kill -KILL "$victim"
  start=$SECONDS
  wait_pid "$JOB" 60 "$name after SIGKILL of rank 1"
  [[ $RC -ne 0 && $RC -ne 124 ]] || fail "$name exited $RC after rank 1 was killed (want non-zero, not the timeout)"
  grep -q "$report" "$TMP/killed.log" || fail "$name does not report rank 1's SIGKILL: $(tail -30 "$TMP/killed.log")"
  [[ ! -s "$TMP/killed.csv" ]] || fail "a row was written by the failed run: $(cat "$TMP/killed.csv")"
  gone_soon "$survivor" "rank 0"
  echo "SIGKILL of rank 1: $name exited $RC after $((SECONDS - start)) s, no row"
}
