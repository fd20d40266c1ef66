#!/usr/bin/env bash
# --inject end to end on ddp's 2 spawned ranks: a delay is named in the row
# and slows the step; a crash is named (rank, signal) at once; a hang ends
# with the collective's timeout, the hung rank named whether it stopped before
# a collective or inside one; none leaves a row; each bad spec is one
# message and exit 2 with the results file unchanged.
set -euo pipefail
BIN="$1"; SRC="$2"
TMP="$(mktemp -d)"; trap 'rm -rf "$TMP"' EXIT
PY="$SRC/.venv/bin/python"; [[ -x "$PY" ]] || PY=python3
fail() { echo "FAIL: $*"; exit 1; }
source "$SRC/tests/e2e/lib/bad_input.sh"
COMMON=(--device=cpu --small-input --width=8 --image-size=16 --batch-size=16 --warmup=1 --progress=off --no-eval
        --expected=off)
run() { OMP_NUM_THREADS=1 timeout 120 "$BIN" --strategy=ddp --gpus=2 "${COMMON[@]}" --steps=4 "$@" --out="$TMP/r.csv"; }

run
run --inject=delay:rank=1,phase=backward,ms=40 --inject=slow-data:rank=0,ms=5,every=2
"$PY" - "$TMP/r.csv" <<'PYEOF'
import csv, sys
plain, delayed = list(csv.DictReader(open(sys.argv[1])))
assert plain["inject"] == "", plain["inject"]
assert delayed["inject"] == "delay:rank=1,phase=backward,ms=40;slow-data:rank=0,ms=5,every=2", delayed["inject"]
# Every rank's step waits for rank 1's late backward: each step is at least the delay.
assert float(delayed["step_ms_p50"]) >= 40, delayed["step_ms_p50"]
PYEOF
snapshot_results

# A crash: named (the rank, killed by signal 9) and no row.
set +e; out="$(run --inject=crash:rank=1,step=3 2>&1)"; rc=$?; set -e
[[ $rc -ne 0 ]] || fail "crash: exited 0"
grep -q "rank 1 (pid [0-9]*) was killed by signal 9" <<<"$out" || fail "crash not named: $out"
# what it was last doing, and how long before: an age of wall-clock seconds, never negative
grep -q "signal 9 (Killed); it was last .* ([0-9][0-9.]* s before)" <<<"$out" || fail "its last progress and age: $out"
unchanged "crash"
# A hang: the others' collective times out (--timeout=5), the run ends, no row.
start=$(date +%s)
set +e; out="$(run --timeout=5 --inject=hang:rank=1,step=3 2>&1)"; rc=$?; set -e
[[ $rc -ne 0 && $rc -ne 124 ]] || fail "hang: exit $rc: $out"
(( $(date +%s) - start < 60 )) || fail "hang: took $(( $(date +%s) - start )) s"
grep -qiE "ddpbench: error: rank 0: .*(timeout|timed out)" <<<"$out" || fail "hang: no timeout named: $out"
[[ $rc -eq 7 ]] || fail "hang: exit $rc, want 7: $out"
grep -q "ddpbench: error: rank 1 never entered collective #[0-9]* of world" <<<"$out" || fail "hang: rank 1 not named: $out"
unchanged "hang"
# Stopped inside a collective (entered, then frozen before its first meeting
# with the others): named as the rank that stopped inside it, exit 7.
set +e
out="$(DDPBENCH_TEST_STOP_AT="shm: inside a collective" DDPBENCH_TEST_CRASH_RANK=1 run --timeout=5 2>&1)"; rc=$?
set -e
grep -q "test stop point (shm: inside a collective)" <<<"$out" || fail "stop inside: the point was not reached: $out"
[[ $rc -eq 7 ]] || fail "stop inside: exit $rc, want 7: $out"
grep -q "ddpbench: error: rank 1 stopped inside collective #[0-9]* of world .* that rank 0 waited in" <<<"$out" ||
  fail "stop inside: rank 1 not named: $out"
unchanged "stop inside"

bad_input ddp "--inject=slow:rank=1,ms=5: 'slow' is not a kind; accepted: delay, slow-data, hang, crash" \
  --gpus=2 --inject=slow:rank=1,ms=5
bad_input ddp "--inject=hang:rank=2,step=3: rank=2 is outside the world of 2 ranks (0..1)" --gpus=2 \
  --inject=hang:rank=2,step=3
bad_input single "--inject=delay:rank=1,phase=data,ms=5: rank=1 is outside the world of 1 rank (0..0)" \
  --inject=delay:rank=1,phase=data,ms=5
bad_input ddp "phase=communication is not a phase every strategy times" --gpus=2 \
  --inject=delay:rank=0,phase=communication,ms=5
echo "inject: ok"
