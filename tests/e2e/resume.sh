#!/usr/bin/env bash
# Training to an answer and surviving failures, through the real
# binary on a small MNIST-format dataset made here:
#  - kill -9 of one rank after the second snapshot, then the same command
#    again: it resumes and ends bit-identical (every tensor of the final
#    snapshot) to an uninterrupted run, for single, ddp and zero1 (2 ranks),
#    zero3 with --replicate-degree=2 (4 ranks), pmp --stage-ranks with
#    --replicate-degree=2 (4 ranks: two pipelines of 2 stages)
#    and pmp (the uninterrupted pmp run is given the shape the interrupted one
#    measured: a second measurement on a loaded machine may choose another);
#    single, ddp and zero1's resumed rows within 10% of their predicted memory;
#  - a bit-flipped and a truncated snapshot are named and skipped;
#  - SIGTERM (to a single process and to the spawning parent) ends the run
#    after the current step with a snapshot and exit code 5;
#  - a time budget stops within one step of the limit, a target accuracy
#    stops early with time_to_target_s, --epochs writes the per-epoch CSV;
#  - bad values give one error line, exit 2 and no row.
set -euo pipefail
BIN="$1"; SRC="$2"
TMP="$(mktemp -d)"; trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$TMP"' EXIT
PY="$SRC/.venv/bin/python"; [[ -x "$PY" ]] || PY=python3
fail() { echo "FAIL: $*"; exit 1; }

# 600 training and 200 test images, 28x28, whose class is a bright square's
# position: a tiny ResNet learns it within a few epochs.
"$PY" "$SRC/tests/e2e/lib/make_idx.py" "$TMP/data" 600 200 1

COMMON=(--device=cpu --dataset=mnist --data-dir="$TMP/data" --small-input --width=4 --batch-size=8
        --warmup=1 --progress=off --optimizer=adam --lr=0.003)
manifests() { ls "$1"/*-step*.json 2>/dev/null | wc -l; }
newest_step() { ls "$1"/*-step*.json | sed 's/.*-step0*\([0-9][0-9]*\)\.json/\1/' | sort -n | tail -1; }
final_file() { ls "$1"/*-step$(printf '%09d' "$2").rank0.pt; }

source "$SRC/tests/e2e/lib/same_tensors.sh"

# The last row's pipeline split and shape as flags, one per line.
shape_flags() {
  "$PY" - "$1" <<'PYEOF'
import csv, sys
r = list(csv.DictReader(open(sys.argv[1])))[-1]
print(f"--split={r['split']}"); print(f"--units={r['units']}"); print(f"--chunks={r['chunks']}")
print(f"--schedule={r['schedule']}")
if r["schedule"].startswith("interleaved"): print(f"--virtual-stages={r['virtual_stages']}")
PYEOF
}

# --- kill -9 one rank after the second snapshot, resume, compare -----------
STEPS=(--steps=14 --snapshot-every=3)
kill_and_resume() {
  local name="$1"; shift
  local args=("${COMMON[@]}" "${STEPS[@]}" "$@")
  DDPBENCH_TEST_STEP_DELAY_MS=250 "$BIN" "${args[@]}" --snapshot-dir="$TMP/run-$name" --out="$TMP/r.csv" \
    2>"$TMP/run-$name.log" &
  local pid=$!
  for _ in $(seq 600); do [[ $(manifests "$TMP/run-$name") -ge 2 ]] && break; sleep 0.05; done
  [[ $(manifests "$TMP/run-$name") -ge 2 ]] || fail "$name: no second snapshot: $(cat "$TMP/run-$name.log")"
  local victim; victim="$(pgrep -P "$pid" | tail -1 || true)"  # a spawned rank, else the process itself
  kill -9 "${victim:-$pid}"
  set +e; wait "$pid"; local rc=$?; set -e
  [[ $rc -ne 0 ]] || fail "$name: the killed run exited 0"
  local before; before="$(newest_step "$TMP/run-$name")"
  [[ $before -lt 15 ]] || fail "$name: the run finished before the kill"
  "$BIN" "${args[@]}" --snapshot-dir="$TMP/run-$name" --out="$TMP/r.csv" 2>"$TMP/resume-$name.log" ||
    fail "$name: the resumed run failed: $(cat "$TMP/resume-$name.log")"
  grep -q "resuming from .*step0*$before.json: step $before" "$TMP/resume-$name.log" ||
    fail "$name: did not resume from step $before: $(cat "$TMP/resume-$name.log")"
  # The uninterrupted run comes after, with the pipeline shape the interrupted
  # one measured and kept in its snapshots (a second measurement may differ).
  local shape=(); [[ $name != pmp* ]] || mapfile -t shape < <(shape_flags "$TMP/r.csv")
  "$BIN" "${args[@]}" "${shape[@]}" --snapshot-dir="$TMP/ref-$name" --out="$TMP/ref.csv" 2>"$TMP/ref-$name.log" ||
    fail "$name: uninterrupted run failed: $(cat "$TMP/ref-$name.log")"
  local ref
  for ref in "$TMP/ref-$name"/*-step000000015.rank*.pt; do  # every rank's final state
    local rank="${ref##*-step000000015.}"  # the configuration hash differs when flags name the shape
    same_tensors_later "$name $(basename "$ref")" "$ref" "$(ls "$TMP/run-$name"/*-step000000015."$rank")"
  done
}
kill_and_resume single --strategy=single
kill_and_resume ddp --strategy=ddp --gpus=2
kill_and_resume zero1 --strategy=zero1 --gpus=2
# HSDP: each of 4 ranks resumes its shard of its group (2 groups of 2).
# --expected=off from here on: only the three rows above have their expectation checked, and
# the after-run calibration would double each small multi-rank run's time.
kill_and_resume hsdp --strategy=zero3 --gpus=4 --oversubscribe --replicate-degree=2 --expected=off
# Shape (chunks, schedule) and units chosen at set-up; half blocks forced, so
# that the resumed run must take its units from the snapshot.
# --rebalance=off: a run re-split after its warm-up cannot be repeated from
# flags (its first steps ran on the set-up split).
DDPBENCH_TEST_AUTO_UNITS=half-blocks kill_and_resume pmp --strategy=pmp --gpus=2 --oversubscribe --rebalance=off \
  --expected=off
# Pipelines replicated: each of 4 ranks resumes its stage of its pipeline (2 x 2).
kill_and_resume pmp-pp-dp --strategy=pmp --stage-ranks --gpus=4 --oversubscribe --replicate-degree=2 --rebalance=off \
  --expected=off
check_same_tensors "a resumed run's final state differs from the uninterrupted run's"

"$PY" - "$TMP/r.csv" <<'PYEOF'
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1])))
assert [r["strategy"] for r in rows] == ["single", "ddp", "zero1", "zero3", "pmp", "pmp"], [r["strategy"] for r in rows]
assert rows[3]["mesh"] == "replicate=2,shard=2", rows[3]["mesh"]
assert rows[5]["mesh"] == "pp=2,dp=2", rows[5]["mesh"]
for r in rows:
    assert r["restarts"] == "1" and int(r["resumed_from_step"]) >= 6, (r["strategy"], r["resumed_from_step"])
    assert r["steps_done"] == "15" and r["stop_reason"] == "steps", (r["steps_done"], r["stop_reason"])
    assert r["snapshot"].endswith("step000000015.json"), r["snapshot"]
# The resumed runs do not keep the loaded snapshot beside the restored state.
for r in rows[:3]:
    worst = max(abs(float(v) - 1) for v in r["memory_vs_expected"].split("/"))
    assert worst <= 0.10, (r["strategy"], r["memory_vs_expected"], r["peak_mem_mb"], r["memory_expected_mb"])
PYEOF

# --- corrupt snapshots are named and skipped ---------------------------------
D="$TMP/ref-single"
ls "$D"/*.json | sed 's/.*-step0*\([0-9]*\)\.json/\1/' | sort -n | tr '\n' ' ' | grep -q "^9 12 15 $" ||
  fail "--snapshot-keep=3 should leave steps 9 12 15: $(ls "$D")"
"$PY" - "$(final_file "$D" 15)" "$(final_file "$D" 12)" <<'PYEOF'
import os, sys
flip, cut = sys.argv[1:3]
data = bytearray(open(flip, "rb").read()); data[len(data) // 2] ^= 0x10; open(flip, "wb").write(data)
os.truncate(cut, os.path.getsize(cut) // 2)
PYEOF
"$BIN" --strategy=single "${COMMON[@]}" --steps=16 --snapshot-every=3 --snapshot-dir="$D" --out="$TMP/c.csv" \
  2>"$TMP/corrupt.log" || fail "resume past corrupt snapshots failed: $(cat "$TMP/corrupt.log")"
grep -q "step000000015.json: rank 0's file .* fails its SHA-1 check (corrupt); trying the previous one" "$TMP/corrupt.log" ||
  fail "bit flip not reported: $(cat "$TMP/corrupt.log")"
grep -q "step000000012.json: rank 0's file .* bytes, the manifest says .* (truncated?); trying the previous one" "$TMP/corrupt.log" ||
  fail "truncation not reported: $(cat "$TMP/corrupt.log")"
grep -q "resuming from .*step000000009.json: step 9" "$TMP/corrupt.log" || fail "did not fall back to step 9"

# --- SIGTERM: finish the step, snapshot, exit 5 ------------------------------
sigterm() {
  local name="$1"; shift
  DDPBENCH_TEST_STEP_DELAY_MS=200 "$BIN" "${COMMON[@]}" --steps=5000 --snapshot-dir="$TMP/term-$name" "$@" \
    --out="$TMP/t.csv" 2>"$TMP/term-$name.log" &
  local pid=$!
  for _ in $(seq 600); do [[ $(manifests "$TMP/term-$name") -ge 1 ]] && break; sleep 0.05; done
  [[ $(manifests "$TMP/term-$name") -ge 1 ]] || fail "$name: no first snapshot: $(cat "$TMP/term-$name.log")"
  kill -TERM "$pid"
  set +e; timeout 60 tail --pid="$pid" -f /dev/null; wait "$pid"; local rc=$?; set -e
  [[ $rc -eq 5 ]] || fail "$name: SIGTERM gave exit $rc (want 5): $(cat "$TMP/term-$name.log")"
  local stopped; stopped="$(sed -n 's/.*stopping after step \([0-9]*\): signal 15 received.*/\1/p' "$TMP/term-$name.log")"
  [[ -n $stopped && $stopped -ge 2 && $(newest_step "$TMP/term-$name") -eq $stopped ]] ||
    fail "$name: no snapshot at the step it stopped after: $(cat "$TMP/term-$name.log"); $(ls "$TMP/term-$name")"
  [[ ! -s "$TMP/t.csv" ]] || fail "$name: a preempted run wrote a row"
}
sigterm single --strategy=single --snapshot-every=2
sigterm ddp --strategy=ddp --gpus=2 --snapshot-every=2 --expected=off

# --- budgets, targets, epochs -------------------------------------------------
DDPBENCH_TEST_STEP_DELAY_MS=100 "$BIN" --strategy=single "${COMMON[@]}" --time-budget=2s --out="$TMP/g.csv" \
  2>"$TMP/budget.log" || fail "budget run: $(cat "$TMP/budget.log")"
"$BIN" --strategy=ddp --gpus=2 "${COMMON[@]}" --target-accuracy=0.6 --eval-every=10 --epochs=20 --expected=off \
  --out="$TMP/g.csv" 2>"$TMP/target.log" || fail "target run: $(cat "$TMP/target.log")"
"$BIN" --strategy=single "${COMMON[@]}" --epochs=2 --out="$TMP/g.csv" 2>"$TMP/epochs.log" ||
  fail "epochs run: $(cat "$TMP/epochs.log")"
"$PY" - "$TMP/g.csv" <<'PYEOF'
import csv, sys
budget, target, epochs = list(csv.DictReader(open(sys.argv[1])))
# Budget: whole steps until 2 s are spent, stopping within one step of it.
step_s = float(budget["train_time_s"]) / int(budget["steps_done"])
assert budget["stop_reason"] == "budget" and budget["time_budget_s"] == "2", budget["stop_reason"]
assert 2.0 <= float(budget["train_time_s"]) < 2.0 + 2 * step_s + 0.3, (budget["train_time_s"], step_s)  # one step (+ slack for a loaded machine)
assert budget["accuracy"] and budget["test_loss"], "a budget run is evaluated"
# Target: stopped early, with the time and steps it took.
assert target["stop_reason"] == "target", target["stop_reason"]
assert float(target["time_to_target_s"]) > 0 and int(target["steps_to_target"]) % 10 == 0, target["steps_to_target"]
assert int(target["steps_done"]) == int(target["steps_to_target"]) < 20 * 30, target["steps_done"]
assert float(target["val_fraction"]) == 0.2, target["val_fraction"]
# Epochs: the per-epoch CSV, named in the row.
assert epochs["epochs_completed"] == "2" and float(epochs["mean_epoch_s"]) > 0, epochs["epochs_completed"]
assert 0 < float(epochs["best_val_loss"]) and 0 <= float(epochs["val_accuracy"]) <= 1
per_epoch = list(csv.DictReader(open(epochs["epoch_csv"])))
assert [e["epoch"] for e in per_epoch] == ["1", "2"] and per_epoch[1]["steps"] == "120", per_epoch  # 480 / 8 per epoch
assert min(float(e["val_loss"]) for e in per_epoch) == float(epochs["best_val_loss"]) or \
    abs(min(float(e["val_loss"]) for e in per_epoch) - float(epochs["best_val_loss"])) < 1e-4
PYEOF

# --- a resumed epoch's figures cover the steps before the restart ------------
EP=(--strategy=single "${COMMON[@]}" --epochs=2 --snapshot-every=25)
"$BIN" "${EP[@]}" --snapshot-dir="$TMP/ep-ref" --epoch-csv="$TMP/ep-ref.csv" --out="$TMP/e.csv" 2>/dev/null ||
  fail "uninterrupted --epochs run failed"
DDPBENCH_TEST_STEP_DELAY_MS=100 "$BIN" "${EP[@]}" --snapshot-dir="$TMP/ep-run" --epoch-csv="$TMP/ep-run.csv" \
  --out="$TMP/e.csv" 2>/dev/null &
pid=$!
for _ in $(seq 600); do [[ $(manifests "$TMP/ep-run") -ge 2 ]] && break; sleep 0.05; done
kill -9 "$pid"; wait "$pid" 2>/dev/null || true
mid="$(newest_step "$TMP/ep-run")"
[[ $((mid % 60)) -ne 0 && $mid -lt 120 ]] || fail "--epochs: want a mid-epoch snapshot, got step $mid"
"$BIN" "${EP[@]}" --snapshot-dir="$TMP/ep-run" --epoch-csv="$TMP/ep-run.csv" --out="$TMP/e.csv" 2>"$TMP/ep.log" ||
  fail "resumed --epochs run failed: $(cat "$TMP/ep.log")"
"$PY" - "$TMP/ep-ref.csv" "$TMP/ep-run.csv" <<'PYEOF'
import csv, sys
ref, run = (list(csv.DictReader(open(p))) for p in sys.argv[1:3])
assert [r["epoch"] for r in run] == ["1", "2"], run
for a, b in zip(ref, run):  # the same training; the epoch mean summed in two parts
    for k in ("train_loss", "val_loss", "val_accuracy"):
        assert abs(float(a[k]) - float(b[k])) < 1e-4, (k, a[k], b[k])
PYEOF

# --- bad values: one error line, exit 2, no row ------------------------------
source "$SRC/tests/e2e/lib/bad_input.sh"
: > "$TMP/r.csv"; snapshot_results
mkdir -p "$TMP/empty"
bad_input single "--time-budget=abc: not a duration" --time-budget=abc
bad_input single "--target-accuracy=1.5: must be at most 1; accepted: a finite number in (0, 1]" --target-accuracy=1.5
bad_input single "--snapshot-every=0: must be a number of steps >= 1 or 'epoch'" --snapshot-dir="$TMP/x" --snapshot-every=0
bad_input single "--resume: $TMP/empty holds no ddpbench snapshot" --snapshot-dir="$TMP/empty" --resume
bad_input single "--resume: --snapshot-dir=$TMP/nowhere does not exist" --snapshot-dir="$TMP/nowhere" --resume
bad_input single "belongs to another configuration (--seed: 42 there, 7 here)" \
  --snapshot-dir="$TMP/ref-single" --resume --seed=7
bad_input ddp "belongs to another configuration (--model: resnet18 there, resnet34 here)" --gpus=2 \
  --snapshot-dir="$TMP/ref-single" --resume --model=resnet34
bad_input single "--resume: snapshots need --snapshot-dir" --resume
bad_input single "--val-fraction=1.5: must be in \[0, 1)" --val-fraction=1.5
bad_input single "--eval-every=5: validation runs only when training to an answer" --eval-every=5
COMMON=(--device=cpu --small-input --width=4 --image-size=16 --batch-size=8 --progress=off)
bad_input single "--target-accuracy=0.5: synthetic data has no validation set" --target-accuracy=0.5
echo "resume: all checks passed"
