#!/usr/bin/env bash
# Pipelines replicated by data parallelism, end to end through the real
# binary: pmp/mp --stage-ranks --replicate-degree=2 on 4 spawned CPU ranks
# (two pipelines of 2 stages, ranks 0-1 and 2-3, each stage all-reducing its
# gradients with its twin): parity with single in float64 over the global
# batch (both replicas' shares) with SGD and Adam, for 1f1b, zero-bubble (its
# W the last gradient), interleaved (two chunks a rank, each all-reduced on
# its own) and mp; the row's mesh and every stage's figures; the hsdp name
# (zero3 replicated one per node: one node here unless the degree is given);
# bad inputs give one message and leave the results file unchanged (hsdp's
# groups must fit a node).
set -euo pipefail
BIN="$1"; SRC="$2"
TMP="$(mktemp -d)"; trap 'rm -rf "$TMP"' EXIT
PY="$SRC/.venv/bin/python"; [[ -x "$PY" ]] || PY=python3
fail() { echo "FAIL: $*"; exit 1; }
COMMON=(--device=cpu --small-input --width=8 --image-size=16 --num-classes=10 --warmup=0 --progress=off)
run() { timeout 300 "$BIN" --strategy="$1" "${COMMON[@]}" --gpus=4 --oversubscribe "${@:2}" --out="$TMP/r.csv" \
          >"$TMP/log" 2>&1 || fail "$*: $(tail -n 5 "$TMP/log")"; }
ADAM=(--optimizer=adam --lr=0.001 --weight-decay=0.01)
PAR=(--steps=2 --verify --verify-steps=2 --batch-size=8)
run pmp --stage-ranks --replicate-degree=2 "${PAR[@]}" --chunks=4 --schedule=1f1b --optimizer=sgd
run pmp --stage-ranks --replicate-degree=2 "${PAR[@]}" --chunks=4 --schedule=zero-bubble "${ADAM[@]}"
run pmp --stage-ranks --replicate-degree=2 "${PAR[@]}" --chunks=4 --schedule=interleaved "${ADAM[@]}"
run mp --stage-ranks --replicate-degree=2 "${PAR[@]}" --optimizer=sgd
# --expected=off where the row's expectation is not checked (hsdp_cli checks hsdp's): the
# after-run calibration doubles a small 4-rank run's time.
run hsdp "${PAR[@]}" "${ADAM[@]}" --expected=off
run hsdp "${PAR[@]}" "${ADAM[@]}" --replicate-degree=2 --expected=off

"$PY" - "$TMP/r.csv" <<'PYEOF'
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1])))
assert len(rows) == 6, len(rows)
pp, hsdp_node, hsdp2 = rows[:4], rows[4], rows[5]
for r in rows:
    assert r["parity_ok"] == "true" and float(r["parity_max_abs_diff"]) <= 1e-10, (r["command"], r["parity_max_abs_diff"])
    assert r["world_size"] == "4", r["world_size"]
for r in pp:
    assert r["mesh"] == "pp=2,dp=2", r["mesh"]
    assert r["global_batch"] == "16", r["global_batch"]  # each replica's batch of 8
    assert len(r["stage_busy_ms"].split("/")) == 2, r["stage_busy_ms"]
    assert r["communication_ms"] != "", r  # the wait for the replicate all-reduce (parity fails without it)
    assert float(r["expected_img_s"]) > 0, r["expected_img_s"]  # the projection models the replicated pipeline
assert hsdp_node["strategy"] == "hsdp" and hsdp_node["mesh"] == "", hsdp_node["mesh"]  # one node: no replicas
assert hsdp2["mesh"] == "replicate=2,shard=2", hsdp2["mesh"]
print("pp x dp and hsdp rows ok: parity", [r["parity_max_abs_diff"] for r in rows])
PYEOF

# Bad inputs: one message each, exit 2, the results file unchanged.
COMMON+=(--batch-size=8)
source "$(dirname "${BASH_SOURCE[0]}")/lib/bad_input.sh"
snapshot_results
bad_input pmp "--replicate-degree=2 with --strategy=pmp: a pipeline is replicated as ranks" --gpus=4 --oversubscribe --replicate-degree=2
bad_input pmp "--replicate-degree=4: 4 ranks in 4 groups leave 1 rank a group, a pipeline of one stage" --gpus=4 --oversubscribe --stage-ranks --replicate-degree=4
bad_input hsdp "--replicate-degree=3: 4 ranks do not divide into 3 equal groups" --gpus=4 --oversubscribe --replicate-degree=3
bad_input mp "--gpus=24 with --replicate-degree=2: 12 stages, but --strategy=mp puts at least one of the model's 10 units on each stage; accepted: at most 10 stages (--gpus<=20)" --gpus=24 --oversubscribe --stage-ranks --replicate-degree=2
# A snapshot of another mesh: two replicated pipelines of 2 stages (global
# batch 16), resumed as one pipeline of 4 stage ranks (per-device batch 8 -> 16),
# each new stage rank reading its layers from the old rank that held them.
run pmp --stage-ranks --replicate-degree=2 --steps=2 --chunks=4 --schedule=1f1b --snapshot-dir="$TMP/snap" --expected=off
run pmp --stage-ranks --steps=4 --chunks=4 --schedule=1f1b --snapshot-dir="$TMP/snap" --expected=off
grep -q "resharded from pmpx4" "$TMP/log" && grep -q "per-device batch 8 -> 16 on 1 replica" "$TMP/log" ||
  fail "one pipeline of 4 stages did not reshard the replicated pipelines' snapshot: $(grep -i snapshot "$TMP/log")"
snapshot_results
# hsdp asks for node-aligned groups: under a launcher whose nodes hold 2 ranks
# each, a degree whose groups span nodes is refused before the rendezvous
# (rank 0 alone exits 2, no other rank needed).
set +e
out="$(RANK=0 LOCAL_RANK=0 WORLD_SIZE=4 LOCAL_WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=29731 timeout 60 \
  "$BIN" --strategy=hsdp --replicate-degree=1 "${COMMON[@]}" --steps=2 --out="$TMP/r.csv" 2>&1 </dev/null)"; rc=$?
set -e
[[ $rc -eq 2 && "$out" == *"--replicate-degree=1 with --strategy=hsdp: shard groups of 4 ranks do not fit in a node's 2 ranks"* ]] \
  || fail "hsdp with groups across nodes: exit $rc: $out"
unchanged "hsdp --replicate-degree=1 across nodes"
echo "ok (exit 2): hsdp groups across nodes"
echo "pp_dp_cli: all checks passed"
