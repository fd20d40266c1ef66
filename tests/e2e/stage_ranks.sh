#!/usr/bin/env bash
# mp/pmp with --stage-ranks: one rank per stage, activations and gradients
# sent between ranks. Every schedule kind (1f1b, zero-bubble with its split
# backward, interleaved with two chunks per rank, gpipe) and mp compute the
# same update as single in float64 (--verify), on 2 spawned ranks and on 3;
# ranks joined by the environment launcher (RANK, WORLD_SIZE) work as spawned
# ones do; with the same split the ranks train exactly as one process driving
# both stages does (same accuracy and loss, every test image counted once),
# and the row holds every stage's figures. Bad inputs exit 2 with one message
# and leave the results file untouched.
set -euo pipefail
BIN="$1"; SRC="$2"
TMP="$(mktemp -d)"
source "$SRC/tests/e2e/lib/launch_common.sh"
clear_launcher_env
trap 'kill_children; rm -rf "$TMP"' EXIT

# --expected=off: no expectation is checked here (the *_cli tests and e2e.docs run
# that calibration); it would double the time of each small multi-rank run.
COMMON=(--device=cpu --oversubscribe --small-input --width=8 --image-size=16 --num-classes=10 --progress=off
        --expected=off)
PAR=("${COMMON[@]}" --steps=2 --warmup=0 --verify --verify-steps=2 --out="$TMP/parity.csv")
for sched in 1f1b zero-bubble interleaved gpipe; do
  timeout 180 "$BIN" --strategy=pmp --stage-ranks --gpus=2 "${PAR[@]}" --batch-size=8 --chunks=4 \
    --schedule=$sched >"$TMP/log" 2>&1 || fail "pmp --stage-ranks --schedule=$sched: $(tail -n 5 "$TMP/log")"
done
timeout 180 "$BIN" --strategy=pmp --stage-ranks --gpus=3 "${PAR[@]}" --batch-size=12 --chunks=3 --schedule=1f1b \
  >"$TMP/log" 2>&1 || fail "pmp --stage-ranks on 3 ranks: $(tail -n 5 "$TMP/log")"
timeout 180 "$BIN" --strategy=mp --stage-ranks --gpus=2 "${PAR[@]}" --batch-size=8 >"$TMP/log" 2>&1 \
  || fail "mp --stage-ranks: $(tail -n 5 "$TMP/log")"
"$PY" - "$TMP/parity.csv" <<'PYEOF' || fail "parity rows"
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1])))
want = [("pmp", "2", "1f1b"), ("pmp", "2", "zero-bubble"), ("pmp", "2", "interleaved"), ("pmp", "2", "gpipe"),
        ("pmp", "3", "1f1b"), ("mp", "2", "")]
assert len(rows) == len(want), f"{len(rows)} rows, want {len(want)}"
for r, (strategy, world, schedule) in zip(rows, want):
    got = (r["strategy"], r["world_size"], r.get("schedule", ""))
    assert got == (strategy, world, schedule), (got, (strategy, world, schedule))
    assert r["parity_ok"] == "true" and float(r["parity_max_abs_diff"]) <= 1e-10, (got, r["parity_max_abs_diff"])
    assert len(r["stage_busy_ms"].split("/")) == int(world), (got, r["stage_busy_ms"])
    assert len(r["mem_per_device_mb"].split("/")) == int(world), (got, r["mem_per_device_mb"])
print("ok: every schedule and mp across ranks match single in float64")
PYEOF

# The same split, micro-batches and data: one process driving both stages,
# then two ranks (spawned), then two ranks from the environment launcher.
"$PY" "$SRC/tests/e2e/lib/make_idx.py" "$TMP/data" 64 37
RUN=(--device=cpu --oversubscribe --dataset=mnist --data-dir="$TMP/data" --small-input --width=4 --batch-size=16
     --chunks=4 --schedule=1f1b --split=5,5 --units=blocks --steps=6 --warmup=1 --progress=off --out="$TMP/same.csv")
timeout 180 "$BIN" --strategy=pmp --gpus=2 "${RUN[@]}" >"$TMP/log" 2>&1 || fail "pmp in one process: $(tail -n 5 "$TMP/log")"
timeout 180 "$BIN" --strategy=pmp --gpus=2 --stage-ranks "${RUN[@]}" >"$TMP/log" 2>&1 \
  || fail "pmp --stage-ranks: $(tail -n 5 "$TMP/log")"
PORT="$(free_port)"
PIDS=()
for r in 0 1; do
  RANK=$r WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=$PORT timeout 180 "$BIN" --strategy=pmp --stage-ranks \
    "${RUN[@]}" >"$TMP/env$r.log" 2>&1 &
  PIDS+=($!)
done
wait_pid "${PIDS[0]}" 200 "rank 0"; RC0=$RC
wait_pid "${PIDS[1]}" 200 "rank 1"; RC1=$RC
[[ $RC0 -eq 0 && $RC1 -eq 0 ]] || fail "env ranks exited $RC0 and $RC1: $(tail -n 5 "$TMP"/env*.log)"
"$PY" - "$TMP/same.csv" <<'PYEOF' || fail "one process against ranks"
import csv, sys
one, spawned, env = list(csv.DictReader(open(sys.argv[1])))
assert (one["world_size"], spawned["world_size"], env["world_size"]) == ("1", "2", "2")
assert (spawned["launcher"], env["launcher"]) == ("spawn", "env"), (spawned["launcher"], env["launcher"])
for r in (spawned, env):
    for k in ("accuracy", "test_loss", "final_loss", "eval_images", "split", "chunks", "schedule"):
        assert r[k] == one[k], f"{r['launcher']} {k}: {r[k]} against {one[k]} in one process"
    assert len(r["throughput_per_rank_img_s"].split("/")) == 2, r["throughput_per_rank_img_s"]
    assert len(r["optimizer_state_mb"].split("/")) == 2, r["optimizer_state_mb"]
    assert len(r["activation_peak_mb"].split("/")) == 2 and len(r["chunk_fbw_ms"].split("/")) == 2, r
    assert 0 <= float(r["bubble_measured"]) < 1, r["bubble_measured"]
assert one["eval_images"] == "37", one["eval_images"]  # the 37 test images, each counted once
print(f"ok: ranks train as one process does (accuracy {one['accuracy']}, loss {one['final_loss']})")
PYEOF

# Bad inputs: exit 2, one message naming the flag, no row.
bad() {  # expected-message flags...
  local want="$1" out rc; shift
  set +e; out="$(timeout 60 "$BIN" "$@" --device=cpu --progress=off --out="$TMP/bad.csv" 2>&1)"; rc=$?; set -e
  [[ $rc -eq 2 ]] || fail "$* exited $rc, want 2: $out"
  [[ "$out" == *"$want"* ]] || fail "$*: message lacks '$want': $out"
  [[ ! -e "$TMP/bad.csv" ]] || fail "$*: wrote a row"
  echo "ok (exit 2): $*"
}
bad "applies only to --strategy=mp|pmp" --strategy=ddp --gpus=2 --stage-ranks
bad "validation during training is not built for stages on separate ranks" --strategy=pmp --gpus=2 --stage-ranks --epochs=1
bad "--rebalance=warmup with --stage-ranks" --strategy=pmp --gpus=2 --stage-ranks --rebalance=warmup
bad "--calibrate with --stage-ranks" --strategy=pmp --gpus=2 --stage-ranks --calibrate="$TMP/p.json"
bad "--chunks=3" --strategy=pmp --gpus=2 --stage-ranks --batch-size=8 --chunks=3
# CUDA ranks would talk NCCL, which pairs messages by order, not tag.
set +e; out="$(timeout 60 "$BIN" --strategy=pmp --gpus=2 --stage-ranks --device=cuda --progress=off \
  --out="$TMP/bad.csv" 2>&1)"; rc=$?; set -e
[[ $rc -eq 2 && "$out" == *"--stage-ranks with --device=cuda"* && ! -e "$TMP/bad.csv" ]] \
  || fail "--stage-ranks --device=cuda: exit $rc: $out"
echo "ok (exit 2): --stage-ranks --device=cuda"
echo "stage_ranks: all checks passed"
