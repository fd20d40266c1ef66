#!/usr/bin/env bash
# DDP end to end through the real binary, ranks spawned by ddpbench itself:
# parity with single on 2 ranks (also with gradient accumulation and the
# gradients as views into the buckets, and with the optimizer stepped bucket
# by bucket in backward: --overlap-optimizer, which zero1 and zero2 share, each rank stepping its slices: checked here too with
# SGD and Adam, small buckets, all-reduce mode, shared memory, one rank, and
# replicas), the row's
# distributed columns and scaling efficiency; bad inputs give one message and
# no row; a rank killed with SIGKILL, and a rank stuck in a collective (past
# --timeout), end the whole run with exit 7 within 30 s, naming the rank (the
# stuck one: with the collective it never entered), with no row written.
set -euo pipefail
BIN="$1"; SRC="$2"
TMP="$(mktemp -d)"; trap 'pkill -KILL -P $$ 2>/dev/null || true; rm -rf "$TMP"' EXIT
PY="$SRC/.venv/bin/python"; [[ -x "$PY" ]] || PY=python3
fail() { echo "FAIL: $*"; exit 1; }
COMMON=(--device=cpu --small-input --width=8 --image-size=16 --batch-size=16 --warmup=2 --progress=off)

"$BIN" --list | grep -q "^ddp " || fail "--list does not show ddp"

"$BIN" --strategy=single "${COMMON[@]}" --steps=6 --out="$TMP/r.csv"
"$BIN" --strategy=ddp --gpus=2 "${COMMON[@]}" --steps=6 --verify --out="$TMP/r.csv"
# Accumulation with the gradients as views into the buckets: one copy of them.
"$BIN" --strategy=ddp --gpus=2 "${COMMON[@]}" --steps=4 --grad-accum=2 --gradient-as-bucket-view --verify --out="$TMP/r.csv"
"$BIN" --strategy=ddp --gpus=2 "${COMMON[@]}" --steps=4 --compression=bf16 --bucket-cap-mb=0.05 --expected=off --out="$TMP/r.csv"
# The optimizer stepped bucket by bucket from Gloo's completions: the same parameters.
"$BIN" --strategy=ddp --gpus=2 "${COMMON[@]}" --steps=4 --overlap-optimizer --bucket-cap-mb=0.05 --verify \
  --expected=off --out="$TMP/r.csv"
"$PY" - "$TMP/r.csv" <<'PYEOF'
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1])))
assert len(rows) == 5, len(rows)
single, ddp, accum, bf16, overlap = rows
for r in (ddp, accum, bf16, overlap):
    assert r["strategy"] == "ddp" and r["gpus"] == "2" and r["world_size"] == "2", r
    assert r["launcher"] == "spawn" and r["global_batch"] == "32" and r["per_device_batch"] == "16", r
    assert len(r["mem_per_device_mb"].split("/")) == 2, r["mem_per_device_mb"]  # one device per rank
    assert float(r["peak_mem_mb"]) > 0 and len(r["throughput_per_rank_img_s"].split("/")) == 2, r
    assert float(r["communication_ms"]) > 0, r["communication_ms"]
    assert 0.0 <= float(r["allreduce_hidden_frac"]) <= 1.0, r["allreduce_hidden_frac"]
    assert r["optimizer_state_mb"] and float(r["optimizer_state_mb"].split("/")[0]) > 0, r
assert "--overlap-optimizer" in overlap["command"], overlap["command"]
assert "--gradient-as-bucket-view" in accum["command"], accum["command"]
# The gradients' memory: the buckets and .grad apart (two copies), or .grad views into the buckets (one).
for r, copies in ((ddp, 2), (accum, 1)):
    param, grad = float(r["param_mb"].split("/")[0]), float(r["grad_mb"].split("/")[0])
    assert abs(grad - copies * param) < 0.01 * param, (r["command"], param, grad)
    assert abs(float(r["memory_vs_expected"].split("/")[0]) - 1) <= 0.10, (r["command"], r["memory_vs_expected"])
for r in (ddp, accum, overlap):
    assert r["parity_ok"] == "true", (r["parity_max_abs_diff"], r["parity_model"])
    assert float(r["parity_max_abs_diff"]) <= 1e-10, r["parity_max_abs_diff"]  # float64 check
    assert r["parity_model"] == "resnet18 norm=group amp=off dtype=float64", r["parity_model"]
assert accum["grad_accum"] == "2" and bf16["compression"] == "bf16" and bf16["bucket_cap_mb"] == "0.05"
# Scaling efficiency against the single row of the same file.
eff = float(ddp["scaling_efficiency"])
expect = float(ddp["throughput_img_s"]) / (2 * float(single["throughput_img_s"]))
assert abs(eff - expect) < 1e-3 * max(1, expect), (eff, expect)
print("ddp rows ok: parity", ddp["parity_max_abs_diff"], accum["parity_max_abs_diff"],
      "efficiency", eff, "hidden", ddp["allreduce_hidden_frac"])
PYEOF

# Memory where the parameters outweigh the activations (ResNet-18 at full width, 16 px): bucket
# views at batch 2 hold no second set of gradients; accumulation holds the first micro-step's
# .grad beside the buckets through the second. The prediction within 5% of each peak. Both run 2
# images a backward, where oneDNN's AVX2 weight gradient takes a workspace it does not take at 1
# (the calibrated line must still be exact at the run's own micro-batch; docs/memory.md).
for extra in "--batch-size=2" "--batch-size=4 --grad-accum=2"; do
  # shellcheck disable=SC2086  # extra is a list of flags
  "$BIN" --strategy=ddp --gpus=2 --device=cpu --small-input --image-size=16 --steps=2 --warmup=2 --no-eval \
    --progress=off --gradient-as-bucket-view $extra --out="$TMP/mem.csv"
done
"$PY" - "$TMP/mem.csv" <<'PYEOF'
import csv, sys
for r in csv.DictReader(open(sys.argv[1])):
    vs = float(r["memory_vs_expected"].split("/")[0])
    assert abs(vs - 1) <= 0.05, (r["command"], r["peak_mem_mb"], r["memory_expected_mb"], vs)
    print("ddp memory ok:", r["per_device_batch"], r["grad_accum"], r["peak_mem_mb"], r["memory_expected_mb"])
PYEOF

# zero1, zero2, zero3 and hsdp with the optimizer stepped slice by slice from their reductions' completions.
ADAM=(--optimizer=adam --lr=0.001 --weight-decay=0.01)
# --expected=off here and above where a row's expectation is not checked: it doubles a small run's time.
zo() { "$BIN" --strategy="$1" "${COMMON[@]}" --steps=2 --overlap-optimizer --verify --expected=off "${@:2}" --out="$TMP/z.csv"; }
zo zero1 --gpus=2 --optimizer=sgd --bucket-cap-mb=0.02                             # Gloo: alltoall, summed
zo zero2 --gpus=2 "${ADAM[@]}" --bucket-cap-mb=0.02
zo zero1 --gpus=2 "${ADAM[@]}" --zero-reduce=all-reduce --bucket-cap-mb=0.05 --cpu-backend=shm
# Shared memory's native reduce-scatter in each group, then stepped from the replicas' all-reduce.
zo zero2 --gpus=4 --oversubscribe --replicate-degree=2 --optimizer=sgd --bucket-cap-mb=0.05 --cpu-backend=shm
zo zero1 --gpus=1 --optimizer=sgd --bucket-cap-mb=0.05                             # no collective: stepped in line
zo zero3 --gpus=2 "${ADAM[@]}"                                                     # each unit's persistent slice
zo hsdp --gpus=2 --replicate-degree=2 --optimizer=sgd --cpu-backend=shm            # shard groups of one rank
"$PY" - "$TMP/z.csv" <<'PYEOF'
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1])))
assert [r["strategy"] for r in rows] == ["zero1", "zero2", "zero1", "zero2", "zero1", "zero3", "hsdp"], len(rows)
assert [r["world_size"] for r in rows] == ["2", "2", "2", "4", "1", "2", "2"], [r["world_size"] for r in rows]
for r in rows:
    assert "--overlap-optimizer" in r["command"], r["command"]
    assert r["parity_ok"] == "true", (r["command"], r["parity_max_abs_diff"])
    assert float(r["parity_max_abs_diff"]) <= 1e-10, (r["command"], r["parity_max_abs_diff"])  # float64
    assert r["parity_model"] == "resnet18 norm=group amp=off dtype=float64", r["parity_model"]
assert rows[2]["zero_reduce"] == "all-reduce" and rows[3]["mesh"], (rows[2]["zero_reduce"], rows[3]["mesh"])
print("zero1/2/3, hsdp --overlap-optimizer rows ok: parity", [r["parity_max_abs_diff"] for r in rows])
PYEOF

source "$(dirname "${BASH_SOURCE[0]}")/lib/bad_input.sh"
snapshot_results
bad() { bad_input ddp "$@"; }
G=$(( $(nproc) + 1 ))
bad "--gpus=$G x --threads-per-device=1: $G threads but this machine has" --gpus=$G
bad "--grad-accum=3: must divide --batch-size=16" --gpus=2 --grad-accum=3
bad "--compression=int8: not accepted; accepted values: none|fp16|bf16" --gpus=2 --compression=int8
bad "--timeout=0: must be > 0" --gpus=2 --timeout=0
bad "--bucket-cap-mb=-1: must be > 0" --gpus=2 --bucket-cap-mb=-1
# Not numbers, infinities and overflows: refused as typed, before any rank starts.
bad "--timeout=inf: not a finite number; accepted: a finite number in (0, 10000000]" --gpus=2 --timeout=inf
bad "--bucket-cap-mb=nan: not a finite number" --gpus=2 --bucket-cap-mb=nan
bad "--seed=18446744073709551616: out of range" --gpus=2 --seed=18446744073709551616
bad_input single "--cpu-backend=shm: applies only to --strategy=ddp|" --cpu-backend=shm
bad_input zero1 "--gradient-as-bucket-view=true: applies only to --strategy=ddp, not to --strategy=zero1" --gpus=2 --gradient-as-bucket-view
bad "data directory for 'cifar10' does not exist" --gpus=2 --dataset=cifar10 --data-dir="$TMP/none"
set +e; out="$("$BIN" --strategy=single --grad-accum=2 --steps=1 2>&1)"; rc=$?; set -e
[[ $rc -eq 2 ]] && grep -q "gradient accumulation is a ddp option" <<<"$out" || fail "grad-accum on single: $rc $out"
bad_input zero2 "--overlap-optimizer with --amp=fp16: the loss scaler must see every gradient" --gpus=2 --overlap-optimizer --amp=fp16
bad_input dp "--overlap-optimizer with --strategy=dp: it steps each parameter as its gradient becomes final (a bucket's reduction, a stage's last backward), which dp does not do yet" --gpus=2 --overlap-optimizer
bad_input pmp "--overlap-optimizer with --stage-ranks: a stage's parameters are stepped by the process's other stages once their rows are done" --gpus=2 --overlap-optimizer --stage-ranks

# The rank of a child process, from its environment.
rank_pid() {  # parent-pid rank
  for c in $(pgrep -P "$1"); do
    tr '\0' '\n' < "/proc/$c/environ" 2>/dev/null | grep -qx "RANK=$2" && { echo "$c"; return; }
  done
}
start_long_run() {  # extra flags; sets PARENT, waits until both ranks train
  "$BIN" --strategy=ddp --gpus=2 "${COMMON[@]}" --steps=100000 "$@" --out="$TMP/r.csv" >"$TMP/run.log" 2>&1 &
  PARENT=$!
  for _ in $(seq 1 300); do
    [[ $(grep -c "joined 2 ranks" "$TMP/run.log") -eq 2 ]] && break
    sleep 0.1
  done
  sleep 1.5
  [[ -n "$(rank_pid "$PARENT" 1)" ]] || fail "rank 1 not found: $(cat "$TMP/run.log")"
}
wait_parent() {  # seconds-limit -> sets RC, ELAPSED
  local start=$SECONDS
  for _ in $(seq 1 $(( $1 * 10 ))); do kill -0 "$PARENT" 2>/dev/null || break; sleep 0.1; done
  if kill -0 "$PARENT" 2>/dev/null; then kill -KILL "$PARENT"; fail "run still alive after $1 s: $(tail -5 "$TMP/run.log")"; fi
  set +e; wait "$PARENT"; RC=$?; set -e
  ELAPSED=$(( SECONDS - start ))
}

# A rank killed with SIGKILL mid-run.
start_long_run
kill -KILL "$(rank_pid "$PARENT" 1)"
wait_parent 30
[[ $RC -eq 7 ]] || fail "killed rank: exit $RC, want 7"
grep -q "ddpbench: error: rank 1 (pid [0-9]*) was killed by signal 9" "$TMP/run.log" || fail "no message naming rank 1: $(tail -5 "$TMP/run.log")"
unchanged "SIGKILL"
echo "SIGKILL of rank 1: run ended with exit $RC after ${ELAPSED}s"

# A rank that stops answering: the other's collective times out (--timeout).
start_long_run --timeout=5
kill -STOP "$(rank_pid "$PARENT" 1)"
wait_parent 30
[[ $RC -ne 0 ]] || fail "stuck rank: exit 0"
# Which collective it is depends on how far rank 0 got on a loaded machine: a
# DDP one in a step, or the barrier that starts the timed steps.
STUCK_MESSAGE="ddpbench: error: rank 0: \(DDP .*\|barrier\)"
grep -q "$STUCK_MESSAGE" "$TMP/run.log" || fail "no message naming rank 0's collective: $(tail -5 "$TMP/run.log")"
grep -q "ddpbench: error: rank 0 (pid [0-9]*) exited with code 7" "$TMP/run.log" || fail "parent did not name rank 0: $(tail -5 "$TMP/run.log")"
# The flight records name the stopped rank and the collective it never entered.
# Stopped before its next collective or inside one, it is named either way.
grep -q "ddpbench: error: rank 1 \(never entered\|stopped inside\) collective #[0-9]* of world" "$TMP/run.log" ||
  fail "no line naming rank 1 and the collective: $(tail -5 "$TMP/run.log")"
unchanged "stuck rank"
echo "stuck rank 1 (SIGSTOP): run ended with exit $RC after ${ELAPSED}s: $(grep "$STUCK_MESSAGE" "$TMP/run.log" | head -1 | cut -c1-160)"
echo "ddp_cli: all checks passed"
