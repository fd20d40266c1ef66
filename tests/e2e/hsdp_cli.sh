#!/usr/bin/env bash
# HSDP end to end through the real binary: zero1/zero2/zero3 with
# --replicate-degree=2 on 4 spawned CPU ranks (2 shard groups of 2, ranks
# 0-1 and 2-3, replicated): parity with single (float64) with SGD and Adam,
# both --zero-reduce values and small buckets, so the replicate all-reduce
# of each reduced shard is checked (parity fails without it); the row's mesh
# and memory (zero3 holds half the model a rank, not the world-of-4 quarter);
# shard groups of one rank (2 ranks, --replicate-degree=2: plain replication,
# the gradients all-reduced over both) at the same parity; bad inputs give one
# message and leave the results file unchanged.
set -euo pipefail
BIN="$1"; SRC="$2"
TMP="$(mktemp -d)"; trap 'rm -rf "$TMP"' EXIT
PY="$SRC/.venv/bin/python"; [[ -x "$PY" ]] || PY=python3
fail() { echo "FAIL: $*"; exit 1; }
COMMON=(--device=cpu --small-input --width=8 --image-size=16 --batch-size=8 --warmup=1 --progress=off)
run() { "$BIN" --strategy="$1" "${COMMON[@]}" --gpus=4 --oversubscribe "${@:2}" --out="$TMP/r.csv"; }
ADAM=(--optimizer=adam --lr=0.001 --weight-decay=0.01)
run zero3 --replicate-degree=2 --steps=2 --verify --optimizer=sgd
# --expected=off where another row already checks that strategy's expectation on the mesh:
# the after-run calibration doubles a small 4-rank run's time.
run zero3 --replicate-degree=2 --steps=2 --verify "${ADAM[@]}" --expected=off
run zero3 --replicate-degree=2 --steps=2 --verify "${ADAM[@]}" --zero-reduce=all-reduce --expected=off
run zero2 --replicate-degree=2 --steps=2 --verify --optimizer=sgd --bucket-cap-mb=0.02
run zero1 --replicate-degree=2 --steps=2 --verify "${ADAM[@]}"
run zero3 --steps=2 "${ADAM[@]}" --expected=off

"$PY" - "$TMP/r.csv" <<'PYEOF'
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1])))
assert len(rows) == 6, len(rows)
assert sum("--expected=off" not in r["command"] for r in rows[:5]) == 3, [r["command"] for r in rows]
hsdp, flat = rows[:5], rows[5]
for r in hsdp:
    assert r["parity_ok"] == "true", (r["command"], r["parity_max_abs_diff"])
    assert float(r["parity_max_abs_diff"]) <= 1e-10, (r["command"], r["parity_max_abs_diff"])  # float64
    assert r["world_size"] == "4", r["world_size"]
    assert r["mesh"] == "replicate=2,shard=2", r["mesh"]
    if "--expected=off" not in r["command"]:  # the projection models the mesh (its replicate step)
        assert float(r["expected_img_s"]) > 0, (r["command"], r["expected_img_s"])
assert flat["mesh"] == "", flat["mesh"]
f = lambda r, k: float(r[k].split("/")[0])
near = lambda a, b: abs(a / b - 1) < 0.05
z3 = hsdp[1]  # Adam, reduce-scatter
# Sharded over the group of 2, not the world of 4.
for k in ("param_mb", "grad_mb", "optimizer_state_mb"):
    assert near(f(z3, k), 2 * f(flat, k)), (k, z3[k], flat[k])
assert near(f(z3, "zero_expected_mb"), 2 * f(flat, "zero_expected_mb")), (z3["zero_expected_mb"], flat["zero_expected_mb"])
print("hsdp rows ok: parity", [r["parity_max_abs_diff"] for r in hsdp], "param_mb", z3["param_mb"], "vs", flat["param_mb"])
PYEOF

# Groups of one rank: each rank holds the whole model; parity fails unless the gradients cross the replicas.
one() { "$BIN" --strategy="$1" "${COMMON[@]}" --gpus=2 --replicate-degree=2 --steps=2 --verify --expected=off "${@:2}" \
  --out="$TMP/one.csv"; }
one hsdp "${ADAM[@]}"
one zero2 --optimizer=sgd --bucket-cap-mb=0.02
one zero1 "${ADAM[@]}"
"$PY" - "$TMP/one.csv" <<'PYEOF'
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1])))
assert len(rows) == 3, len(rows)
for r in rows:
    assert r["parity_ok"] == "true" and float(r["parity_max_abs_diff"]) <= 1e-10, (r["command"], r["parity_max_abs_diff"])
    assert r["mesh"] == "replicate=2,shard=1" and r["world_size"] == "2", (r["mesh"], r["world_size"])
print("groups of one rank ok: parity", [r["parity_max_abs_diff"] for r in rows])
PYEOF

source "$(dirname "${BASH_SOURCE[0]}")/lib/bad_input.sh"
snapshot_results
bad_input zero3 "--replicate-degree=3: 4 ranks do not divide into 3 equal groups; accepted: a divisor of 4 (1, 2, 4)" --gpus=4 --oversubscribe --replicate-degree=3
bad_input hsdp "--replicate-degree=4: 2 ranks do not divide into 4 equal groups; accepted: a divisor of 2 (1, 2)" --gpus=2 --replicate-degree=4
bad_input zero2 "--replicate-degree=0: must be at least 1; accepted: an integer from 1 to 1024" --gpus=2 --replicate-degree=0
bad_input ddp "--replicate-degree=2: applies only to --strategy=mp|pmp|zero1|zero2|zero3|hsdp" --gpus=4 --oversubscribe --replicate-degree=2
echo "hsdp_cli: all checks passed"
