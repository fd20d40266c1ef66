#!/usr/bin/env bash
# zero2 and zero3 end to end through the real binary, ranks spawned by
# ddpbench itself: parity with single (float64) after K steps with SGD
# (momentum) and Adam on 2 and 3 ranks, with both --zero-reduce values and
# small buckets; AMP bf16 and fp16 run; the memory columns of ddp, zero1,
# zero2 and zero3 for Adam on 2 ranks (optimizer state 1/N from zero1 on,
# gradients 1/N from zero2 on, parameters 1/N in zero3, zero3 holding at most
# two units in full); bad inputs give one message and leave the results
# file unchanged.
set -euo pipefail
BIN="$1"; SRC="$2"
TMP="$(mktemp -d)"; trap 'rm -rf "$TMP"' EXIT
PY="$SRC/.venv/bin/python"; [[ -x "$PY" ]] || PY=python3
fail() { echo "FAIL: $*"; exit 1; }
# --expected=off: no expectation is checked here (the *_cli tests and e2e.docs run
# that calibration); it would double the time of each small multi-rank run.
COMMON=(--device=cpu --small-input --width=8 --image-size=16 --batch-size=8 --warmup=1 --progress=off --expected=off)

for s in zero2 zero3; do "$BIN" --list | grep -q "^$s " || fail "--list does not show $s"; done

run() { "$BIN" --strategy="$1" "${COMMON[@]}" "${@:2}" --out="$TMP/r.csv"; }
ADAM=(--optimizer=adam --lr=0.001 --weight-decay=0.01)
run zero2 --gpus=2 --steps=2 --verify --optimizer=sgd
run zero2 --gpus=2 --steps=2 --verify "${ADAM[@]}" --bucket-cap-mb=0.02
run zero2 --gpus=3 --oversubscribe --steps=2 --verify --optimizer=sgd --bucket-cap-mb=0.05 --zero-reduce=all-reduce
run zero3 --gpus=2 --steps=2 --verify --optimizer=sgd
run zero3 --gpus=2 --steps=2 --verify "${ADAM[@]}" --zero-reduce=all-reduce
run zero3 --gpus=3 --oversubscribe --steps=2 --verify "${ADAM[@]}"
run zero3 --gpus=2 --steps=2 --amp=bf16 "${ADAM[@]}"
run zero2 --gpus=2 --steps=2 --amp=fp16
for s in ddp zero1 zero2 zero3; do run $s --gpus=2 --steps=2 "${ADAM[@]}"; done

"$PY" - "$TMP/r.csv" <<'PYEOF'
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1])))
assert len(rows) == 12, len(rows)
parity, (bf16, fp16), (ddp, z1, z2, z3) = rows[:6], rows[6:8], rows[8:]
for r in parity:
    assert r["parity_ok"] == "true", (r["command"], r["parity_max_abs_diff"])
    assert float(r["parity_max_abs_diff"]) <= 1e-10, (r["command"], r["parity_max_abs_diff"])  # float64
    assert r["parity_model"] == "resnet18 norm=group amp=off dtype=float64", r["parity_model"]
assert [r["world_size"] for r in parity] == ["2", "2", "3", "2", "2", "3"], [r["world_size"] for r in parity]
assert parity[2]["zero_reduce"] == "all-reduce" and parity[4]["zero_reduce"] == "all-reduce"
assert bf16["amp"] == "bf16" and fp16["amp"] == "fp16" and float(bf16["final_loss"]) > 0
f = lambda r, k: float(r[k].split("/")[0])
for r in (ddp, z1, z2, z3):
    for k in ("param_mb", "grad_mb", "zero_expected_mb", "optimizer_state_mb"):
        assert r[k] and f(r, k) > 0, (r["strategy"], k, r[k])
full = f(ddp, "param_mb")
# Optimizer state 1/N from stage 1 on, gradients from stage 2, parameters in stage 3
# (give or take the padding and 2-decimal rounding).
near = lambda a, b: abs(a / b - 1) < 0.05
assert near(f(ddp, "optimizer_state_mb"), 2 * full), ddp  # Adam: two moments
for z in (z1, z2, z3):
    assert near(f(z, "optimizer_state_mb"), full), (z["strategy"], z["optimizer_state_mb"])
assert near(f(z1, "param_mb"), full) and near(f(z1, "grad_mb"), full), z1
assert near(f(z2, "param_mb"), full) and near(f(z2, "grad_mb"), full / 2), z2
assert near(f(z3, "param_mb"), full / 2) and near(f(z3, "grad_mb"), full / 2), z3
assert near(f(ddp, "grad_mb"), 2 * full), ddp  # .grad and the Reducer's buckets
# The formula: 16 B per float32 parameter for ddp; 8 + 8/2, 4 + 12/2, 16/2 for stages 1-3.
assert near(f(ddp, "zero_expected_mb"), 4 * full), ddp["zero_expected_mb"]
for z, k in ((z1, 12 / 4), (z2, 10 / 4), (z3, 8 / 4)):
    assert near(f(z, "zero_expected_mb"), k * full), (z["strategy"], z["zero_expected_mb"], full)
    held = f(z, "param_mb") + f(z, "grad_mb") + f(z, "optimizer_state_mb")
    assert near(held, f(z, "zero_expected_mb")), (z["strategy"], held, z["zero_expected_mb"])
assert z3["units_gathered_max"] == "2" and not z2["units_gathered_max"], z3["units_gathered_max"]
print("zero2/zero3 rows ok; per rank MB (param/grad/optimizer, expected):",
      {r["strategy"]: (r["param_mb"], r["grad_mb"], r["optimizer_state_mb"], r["zero_expected_mb"])
       for r in (ddp, z1, z2, z3)})
PYEOF

source "$(dirname "${BASH_SOURCE[0]}")/lib/bad_input.sh"
snapshot_results
bad_input zero2 "--compression=fp16: gradient compression is a ddp option; zero2 reduces" --gpus=2 --compression=fp16
bad_input zero3 "--zero-reduce=scatter: not accepted; accepted values: reduce-scatter|all-reduce" --gpus=2 --zero-reduce=scatter
bad_input zero3 "--bucket-cap-mb=5: zero3's buckets are the model's units" --gpus=2 --bucket-cap-mb=5
bad_input zero3 "--grad-accum=2: gradient accumulation is a ddp option" --gpus=2 --grad-accum=2
echo "zero23_cli: all checks passed"
