#!/usr/bin/env bash
# --cpu-backend=shm end to end on 2 ranks: two runs started together on one
# host each finish with their own correct row (their segments never collide;
# ddp steps its optimizer bucket by bucket from the shared-memory backend's
# completions, with gradient accumulation and the gradients as views into its
# buckets, which average in place in the arenas, and pmp --stage-ranks hands its
# activations and gradients through the mailboxes, both at float64 parity); a
# rank killed with SIGKILL mid-run ends the run with exit 7 naming it, both
# under ddpbench's own spawn (the launcher names it) and with the ranks started
# by hand (the survivor's shared-memory wait, ddp's and pmp's, sees the dead
# pid and names it itself); afterwards /dev/shm holds no segment of the run.
set -euo pipefail
BIN="$1"; SRC="$2"
TMP="$(mktemp -d)"; trap 'pkill -KILL -P $$ 2>/dev/null || true; rm -rf "$TMP"' EXIT
PY="$SRC/.venv/bin/python"; [[ -x "$PY" ]] || PY=python3
fail() { echo "FAIL: $*"; exit 1; }
COMMON=(--gpus=2 --device=cpu --small-input --width=8 --image-size=16 --batch-size=16 --warmup=1
        --progress=off --no-eval --expected=off --cpu-backend=shm)
export OMP_NUM_THREADS=1

# The segments of the processes given (a segment is named by the pid of its group's rank 0).
segments_of() { for pid in "$@"; do ls /dev/shm 2>/dev/null | grep "^ddpbench-$pid-" || true; done; }

# Two runs at once, with parity: each its own segment, its own row; the first
# ddp with its optimizer overlapped, the second pmp with a process per stage,
# its hand-offs through the shared-memory mailboxes.
EXTRA1=(--strategy=ddp --overlap-optimizer --grad-accum=2 --bucket-cap-mb=0.05 --gradient-as-bucket-view)
EXTRA2=(--strategy=pmp --stage-ranks --chunks=4 --schedule=zero-bubble)
for k in 1 2; do
  extra="EXTRA$k[@]"
  timeout 120 "$BIN" "${COMMON[@]}" --steps=4 --verify "${!extra}" --out="$TMP/run$k.csv" >"$TMP/run$k.log" 2>&1 &
  eval "JOB$k=$!"
done
for k in 1 2; do
  job="JOB$k"; wait "${!job}" || fail "run $k of two at once: exit $?: $(tail -5 "$TMP/run$k.log")"
  [[ $(grep -c "joined 2 ranks (shm" "$TMP/run$k.log") -eq 2 ]] || fail "run $k not on shared memory: $(head -5 "$TMP/run$k.log")"
done
grep -q "point-to-point mailboxes" "$TMP/run2.log" || fail "pmp --stage-ranks without mailboxes: $(head -5 "$TMP/run2.log")"
"$PY" - "$TMP/run1.csv" "$TMP/run2.csv" <<'PYEOF'
import csv, sys
for path in sys.argv[1:]:
    rows = list(csv.DictReader(open(path)))
    assert len(rows) == 1, (path, len(rows))
    r = rows[0]
    assert r["strategy"] in ("ddp", "pmp") and r["world_size"] == "2" and float(r["throughput_img_s"]) > 0, r
    assert r["parity_ok"] == "true" and float(r["parity_max_abs_diff"]) <= 1e-10, (r["parity_max_abs_diff"], path)
print("two runs at once: both rows ok")
PYEOF

# The pid of rank `$2` among the children of `$1`, from its environment.
rank_pid() {
  for c in $(pgrep -P "$1"); do
    tr '\0' '\n' < "/proc/$c/environ" 2>/dev/null | grep -qx "RANK=$2" && { echo "$c"; return; }
  done
}
wait_joined() {  # log, ranks: until that many ranks joined, then a little training
  for _ in $(seq 1 300); do [[ $(grep -c "joined 2 ranks" "$1" 2>/dev/null) -ge $2 ]] && break; sleep 0.1; done
  [[ $(grep -c "joined 2 ranks" "$1") -ge $2 ]] || fail "ranks never joined: $(tail -5 "$1")"
  sleep 1.5
}
wait_exit() {  # pid, log -> RC; fails past 30 s
  for _ in $(seq 1 300); do kill -0 "$1" 2>/dev/null || break; sleep 0.1; done
  if kill -0 "$1" 2>/dev/null; then kill -KILL "$1"; fail "still running 30 s after the kill: $(tail -5 "$2")"; fi
  set +e; wait "$1"; RC=$?; set -e
}

# SIGKILL of rank 1 under ddpbench's spawn.
"$BIN" "${COMMON[@]}" --strategy=ddp --steps=100000 --out="$TMP/killed.csv" >"$TMP/spawn.log" 2>&1 &
PARENT=$!
wait_joined "$TMP/spawn.log" 2
R0="$(rank_pid "$PARENT" 0)"; R1="$(rank_pid "$PARENT" 1)"
[[ -n "$R0" && -n "$R1" ]] || fail "ranks not found: $(cat "$TMP/spawn.log")"
[[ -z "$(segments_of "$R0" "$R1")" ]] || fail "a segment still linked while the run trains: $(segments_of "$R0" "$R1")"
kill -KILL "$R1"
wait_exit "$PARENT" "$TMP/spawn.log"
[[ $RC -eq 7 ]] || fail "spawn, rank 1 killed: exit $RC, want 7: $(tail -5 "$TMP/spawn.log")"
grep -q "ddpbench: error: rank 1 (pid $R1) was killed by signal 9" "$TMP/spawn.log" ||
  fail "spawn: rank 1 not named: $(tail -5 "$TMP/spawn.log")"
[[ -z "$(segments_of "$R0" "$R1")" ]] || fail "spawn: left in /dev/shm: $(segments_of "$R0" "$R1")"
[[ ! -e "$TMP/killed.csv" ]] || fail "spawn: a row was written"
echo "spawn: SIGKILL of rank 1 named, exit 7, /dev/shm clean"

# The same with the ranks started by hand: only rank 0's own wait can notice
# (ddp: in a collective; pmp --stage-ranks: in a collective or a stage hand-off).
by_hand() {  # strategy flags...
  local PORT; PORT="$("$PY" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
  for r in 0 1; do
    env RANK=$r WORLD_SIZE=2 LOCAL_RANK=$r LOCAL_WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT="$PORT" \
      "$BIN" "${COMMON[@]}" "$@" --steps=100000 --out="$TMP/killed.csv" >"$TMP/rank$r.log" 2>&1 &
    eval "RANK$r=$!"
  done
  wait_joined "$TMP/rank0.log" 1
  kill -KILL "$RANK1"
  wait_exit "$RANK0" "$TMP/rank0.log"
  [[ $RC -eq 7 ]] || fail "by hand, $*, rank 1 killed: rank 0 exit $RC, want 7: $(tail -5 "$TMP/rank0.log")"
  grep -q "rank 1 (pid $RANK1) has exited" "$TMP/rank0.log" || fail "$*: rank 0 did not name rank 1: $(tail -5 "$TMP/rank0.log")"
  [[ -z "$(segments_of "$RANK0" "$RANK1")" ]] || fail "by hand, $*: left in /dev/shm: $(segments_of "$RANK0" "$RANK1")"
  [[ ! -e "$TMP/killed.csv" ]] || fail "by hand, $*: a row was written"
  echo "by hand, $*: rank 0 named rank 1 ($(grep -m1 "has exited" "$TMP/rank0.log" | cut -c1-160)), exit 7, /dev/shm clean"
}
by_hand --strategy=ddp
by_hand --strategy=pmp --stage-ranks --chunks=4
# A rank killed at each point of the shared-memory set-up (the group's
# segment made or mapped, an arena made, every arena mapped): the run ends
# within its timeout with exit 7 naming the dead rank, and the launcher leaves
# nothing of it in /dev/shm.
# Segments whose creating process is gone (a segment is named by its creator's
# pid): what a dead rank left. A live creator's segment is another run's, in use
# (ctest runs other tests beside this one, on shared memory by default).
orphans() {
  for name in $(ls /dev/shm | grep '^ddpbench-' || true); do
    pid="${name#ddpbench-}"; pid="${pid%%-*}"
    kill -0 "$pid" 2>/dev/null || echo "$name"
  done | sort
}
before="$(orphans)"
# Rank 0 passes all four; rank 1 maps the segment rank 0 made, so three.
for rank in 0 1; do
  for point in $(seq 1 $((4 - rank))); do
    set +e
    DDPBENCH_TEST_CRASH_AT=$point DDPBENCH_TEST_CRASH_RANK=$rank timeout 60 "$BIN" "${COMMON[@]}" --strategy=ddp \
      --steps=2 --timeout=20 --out="$TMP/setup.csv" >"$TMP/setup.log" 2>&1
    RC=$?; set -e
    [[ $RC -eq 7 ]] || fail "rank $rank killed at set-up point $point: exit $RC, want 7: $(tail -5 "$TMP/setup.log")"
    grep -q "test crash point $point (shm: " "$TMP/setup.log" || fail "point $point is not a set-up point: $(tail -3 "$TMP/setup.log")"
    grep -q "ddpbench: error: rank $rank (pid [0-9]*) was killed by signal 9" "$TMP/setup.log" ||
      fail "point $point: rank $rank not named: $(tail -5 "$TMP/setup.log")"
    after="$(orphans)"
    [[ "$after" == "$before" ]] || fail "point $point, rank $rank: left in /dev/shm: $(comm -13 <(echo "$before") <(echo "$after"))"
    [[ ! -e "$TMP/setup.csv" ]] || fail "point $point: a row was written"
  done
done
echo "set-up kills: each set-up point of either rank named, exit 7, /dev/shm clean"

# The row says which backend ran: shared memory by default, Gloo when asked,
# and Gloo with the reason where /dev/shm is too small (a private mount
# namespace with a 1 MiB /dev/shm).
DEFAULTS=(--gpus=2 --device=cpu --small-input --width=8 --image-size=16 --batch-size=16 --warmup=1 --steps=2
          --progress=off --no-eval --expected=off --strategy=ddp)
"$BIN" "${DEFAULTS[@]}" --out="$TMP/backend.csv" >"$TMP/b1.log" 2>&1 || fail "default backend run: $(tail -3 "$TMP/b1.log")"
"$BIN" "${DEFAULTS[@]}" --cpu-backend=gloo --out="$TMP/backend.csv" >"$TMP/b2.log" 2>&1 || fail "gloo run: $(tail -3 "$TMP/b2.log")"
small_shm=0
if command -v unshare >/dev/null && unshare -m true 2>/dev/null; then
  unshare -m sh -c "mount -t tmpfs -o size=1m tmpfs /dev/shm && exec \"\$0\" \"\$@\"" "$BIN" "${DEFAULTS[@]}" \
    --out="$TMP/backend.csv" >"$TMP/b3.log" 2>&1 || fail "1 MiB /dev/shm run: $(tail -3 "$TMP/b3.log")"
  small_shm=1
fi
"$PY" - "$TMP/backend.csv" "$small_shm" <<'PYEOF'
import csv, re, sys
rows = list(csv.DictReader(open(sys.argv[1])))
want = 3 if sys.argv[2] == "1" else 2
assert len(rows) == want, len(rows)
assert rows[0]["comm_backend"] == "shm", rows[0]["comm_backend"]
assert rows[1]["comm_backend"] == "gloo", rows[1]["comm_backend"]
if want == 3:
    assert re.fullmatch(r"gloo\(shm: /dev/shm \d+ MiB free < \d+ MiB needed\)", rows[2]["comm_backend"]), rows[2]["comm_backend"]
for r in rows:
    assert r["cpu_isa"] in ("default", "avx2", "avx512", "zvector", "vsx", "sve256"), r["cpu_isa"]
    assert re.fullmatch(r"cpu-[0-9a-f]{12}", r["machine_id"]), r["machine_id"]
print("comm_backend:", [r["comm_backend"] for r in rows])
PYEOF
echo "shm_runs: all checks passed"
