#!/usr/bin/env bash
# torchrun elastic with two agents ("nodes") on this machine, one rank each,
# ddp with --norm=group and snapshots: agent 2 is killed with -9 mid-run; the
# survivor's group restarts on 1 rank, reshards the newest intact snapshot
# and goes on (per-device batch doubled). The run completes, its row names
# the worlds and restarts, and the final model equals an uninterrupted 2-rank
# run's to round-off (1e-4: float32 differences grow with every step after the
# change; 5.6e-6 measured 12 steps after it). (Growing back when a third agent joins is not
# checked: on this machine torch 2.11's re-rendezvous after a killed agent
# timed out waiting for the new member's keys.)
set -euo pipefail
BIN="$1"; SRC="$2"
TMP="$(mktemp -d)"
PIDS=()
trap 'for p in "${PIDS[@]}"; do kill -9 $(pgrep -P "$p") "$p" 2>/dev/null || true; done; rm -rf "$TMP"' EXIT
PY="$SRC/.venv/bin/python"; [[ -x "$PY" ]] || PY=python3
TORCHRUN="$SRC/.venv/bin/torchrun"
[[ -x "$TORCHRUN" ]] || { echo "SKIP: $TORCHRUN is missing"; exit 77; }
fail() { echo "FAIL: $*"; for f in "$TMP"/a*.log; do echo "== $f"; tail -8 "$f"; done; exit 1; }
export TMPDIR="$TMP"
"$PY" "$SRC/tests/e2e/lib/make_idx.py" "$TMP/data" 600 200 1
for v in $(env | grep -oE '^(RANK|WORLD_SIZE|LOCAL_RANK|MASTER_ADDR|MASTER_PORT|SLURM_[A-Z_]+|OMPI_[A-Z_]+)='); do
  unset "${v%=}"
done

FLAGS=(--device=cpu --dataset=mnist --data-dir="$TMP/data" --small-input --width=4 --batch-size=8 --warmup=1
       --progress=off --optimizer=adam --lr=0.003 --norm=group --no-eval --strategy=ddp --steps=17
       --snapshot-every=3)
# The uninterrupted run under the same launcher (the ranks' threads as there).
"$TORCHRUN" --standalone --nproc-per-node=2 --no-python "$BIN" "${FLAGS[@]}" --snapshot-dir="$TMP/ref" \
  --out="$TMP/ref.csv" >"$TMP/ref.log" 2>&1 || fail "uninterrupted run: $(tail -3 "$TMP/ref.log")"

PORT="$("$PY" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
agent() {  # LOG IS_HOST: one torchrun agent of the elastic job (the first hosts the rendezvous store)
  DDPBENCH_TEST_STEP_DELAY_MS=300 "$TORCHRUN" --nnodes=1:2 --nproc-per-node=1 --rdzv-backend=c10d \
    --rdzv-endpoint="127.0.0.1:$PORT" --rdzv-id=elastic --max-restarts=3 --rdzv-conf="last_call_timeout=2,is_host=$2" \
    --monitor-interval=0.5 --no-python "$BIN" "${FLAGS[@]}" --snapshot-dir="$TMP/run" --out="$TMP/r.csv" \
    >"$1" 2>&1 &
  PIDS+=($!)
}
wait_for() {  # FILE PATTERN COUNT SECONDS
  for _ in $(seq $((4 * $4))); do [[ $(grep -c "$2" "$1" 2>/dev/null || true) -ge $3 ]] && return 0; sleep 0.25; done
  fail "no $3 x '$2' in $1 within $4 s"
}

agent "$TMP/a1.log" true; A1=${PIDS[-1]}
sleep 1
agent "$TMP/a2.log" false; A2=${PIDS[-1]}
wait_for "$TMP/a1.log" "joined 2 ranks" 1 90
newest_step() { ls "$1"/*-step*.json 2>/dev/null | sed 's/.*-step0*\([0-9][0-9]*\)\.json/\1/' | sort -n | tail -1; }
for _ in $(seq 240); do [[ $(newest_step "$TMP/run") -ge 6 ]] && break; sleep 0.25; done
[[ $(newest_step "$TMP/run") -ge 6 ]] || fail "no snapshot of step 6"
kill -9 "$A2" $(pgrep -P "$A2")  # the agent and its worker: a node gone
wait_for "$TMP/a1.log" "joined 1 ranks" 1 90
wait_for "$TMP/a1.log" "resharded from ddpx2" 1 30
set +e; wait "$A1"; rc1=$?; set -e
[[ $rc1 -eq 0 ]] || fail "the surviving agent exited $rc1"

"$PY" - "$TMP/r.csv" <<'PYEOF' || fail "the row does not describe the elastic run"
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1])))
assert len(rows) == 1, f"{len(rows)} rows"
r = rows[0]
assert r["launcher"] == "torchrun" and r["steps_done"] == "18", r
assert r["worlds"] == "ddp:2x8,ddp:1x16", r["worlds"]
print(f"worlds {r['worlds']}, restarts {r['restarts']}, steps lost {r['steps_lost']}")
PYEOF
"$PY" "$SRC/scripts/ddpbench_py/snapshot_state.py" "$TMP"/ref/*-step000000018.json "$TMP"/run/*-step000000018.json \
  --atol=1e-4 || fail "the final model differs from the uninterrupted run's beyond round-off"
echo "elastic: all checks passed"
