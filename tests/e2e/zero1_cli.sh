#!/usr/bin/env bash
# ZeRO-1 end to end through the real binary, ranks spawned by ddpbench itself:
# parity with single after K steps on 2 ranks with SGD (momentum) and Adam, with
# both --zero-reduce values and with many small buckets, on 1 and 3 ranks; the
# row's columns; optimizer_state_mb per rank about 1/N of ddp's for Adam on 2
# and 4 ranks (4 oversubscribed is fine for a memory figure); fp16 and bf16
# AMP run; bad inputs give one message and leave the results file unchanged.
set -euo pipefail
BIN="$1"; SRC="$2"
TMP="$(mktemp -d)"; trap 'rm -rf "$TMP"' EXIT
PY="$SRC/.venv/bin/python"; [[ -x "$PY" ]] || PY=python3
fail() { echo "FAIL: $*"; exit 1; }
COMMON=(--device=cpu --small-input --width=8 --image-size=16 --batch-size=16 --warmup=1 --progress=off)

"$BIN" --list | grep -q "^zero1 " || fail "--list does not show zero1"

# --expected=off: these rows' expectations are not checked (the memory run below checks its
# own); the after-run calibration would double each small run's time.
z1() { "$BIN" --strategy=zero1 "${COMMON[@]}" --expected=off "$@" --out="$TMP/r.csv"; }
z1 --gpus=2 --steps=3 --verify --optimizer=sgd
z1 --gpus=2 --steps=3 --verify --optimizer=adam --lr=0.001
z1 --gpus=2 --steps=3 --verify --optimizer=sgd --zero-reduce=all-reduce --weight-decay=0.01
z1 --gpus=2 --steps=3 --verify --optimizer=adam --lr=0.001 --zero-reduce=all-reduce
z1 --gpus=2 --steps=3 --verify --optimizer=adam --lr=0.001 --bucket-cap-mb=0.02 --weight-decay=0.01
z1 --gpus=1 --steps=3 --verify --optimizer=adam --lr=0.001
z1 --gpus=3 --oversubscribe --steps=2 --verify --optimizer=sgd --bucket-cap-mb=0.05  # padded slices
z1 --gpus=2 --steps=2 --amp=fp16
z1 --gpus=2 --steps=2 --amp=bf16 --optimizer=adam --lr=0.001
# Optimizer state per rank against ddp's, Adam, 2 and 4 ranks.
for n in 2 4; do
  "$BIN" --strategy=ddp --gpus=$n --oversubscribe "${COMMON[@]}" --steps=2 --optimizer=adam --lr=0.001 --expected=off \
    --out="$TMP/r.csv"
  z1 --gpus=$n --oversubscribe --steps=2 --optimizer=adam --lr=0.001
done

"$PY" - "$TMP/r.csv" <<'PYEOF'
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1])))
assert len(rows) == 13, len(rows)
sgd, adam, sgd_ar, adam_ar, small, world1, world3, fp16, bf16, ddp2, z2, ddp4, z4 = rows
for r in (sgd, adam, sgd_ar, adam_ar, small, world1, world3):
    assert r["strategy"] == "zero1", r
    assert r["parity_ok"] == "true", (r["command"], r["parity_max_abs_diff"], r["parity_model"])
    assert float(r["parity_max_abs_diff"]) <= 1e-10, (r["command"], r["parity_max_abs_diff"])  # float64
    assert r["parity_model"] == "resnet18 norm=group amp=off dtype=float64", r["parity_model"]
for r in (sgd, adam, sgd_ar, adam_ar, small, fp16, bf16, z2):
    assert r["gpus"] == "2" and r["world_size"] == "2" and r["launcher"] == "spawn", r
    assert r["global_batch"] == "32" and r["per_device_batch"] == "16", r
    assert len(r["mem_per_device_mb"].split("/")) == 2 and float(r["peak_mem_mb"]) > 0, r
    assert float(r["communication_ms"]) > 0, r["communication_ms"]
    assert 0.0 <= float(r["allreduce_hidden_frac"]) <= 1.0, r["allreduce_hidden_frac"]
    assert len(r["optimizer_state_mb"].split("/")) == 2, r["optimizer_state_mb"]
assert sgd["zero_reduce"] == "reduce-scatter" and sgd_ar["zero_reduce"] == "all-reduce", sgd["zero_reduce"]
assert sgd["bucket_cap_mb"] == "25" and small["bucket_cap_mb"] == "0.02", small["bucket_cap_mb"]
assert world1["world_size"] == "1" and not world1["communication_ms"], world1
assert world3["world_size"] == "3" and len(world3["optimizer_state_mb"].split("/")) == 3, world3
assert fp16["amp"] == "fp16" and bf16["amp"] == "bf16"
# SGD keeps one momentum buffer, Adam two moments: twice as much state.
s, a = float(sgd["optimizer_state_mb"].split("/")[0]), float(adam["optimizer_state_mb"].split("/")[0])
assert abs(a / s - 2) < 0.05, (s, a)
for n, ddp, z in ((2, ddp2, z2), (4, ddp4, z4)):
    assert ddp["strategy"] == "ddp" and z["strategy"] == "zero1" and z["world_size"] == str(n), (ddp, z)
    full = [float(x) for x in ddp["optimizer_state_mb"].split("/")]
    mine = [float(x) for x in z["optimizer_state_mb"].split("/")]
    assert len(full) == n and len(mine) == n and len(set(full)) == 1, (full, mine)
    for m in mine:  # 1/N of ddp's, give or take the padding and 2-decimal rounding
        assert abs(m / (full[0] / n) - 1) < 0.05, (n, full, mine)
    print(f"adam optimizer_state_mb at {n} ranks: ddp {ddp['optimizer_state_mb']}, zero1 {z['optimizer_state_mb']}; "
          f"peak mem ddp {ddp['mem_per_device_mb']}, zero1 {z['mem_per_device_mb']}")
print("zero1 rows ok: parity sgd", sgd["parity_max_abs_diff"], "adam", adam["parity_max_abs_diff"],
      "all-reduce", sgd_ar["parity_max_abs_diff"], adam_ar["parity_max_abs_diff"], "small buckets",
      small["parity_max_abs_diff"], "world 1", world1["parity_max_abs_diff"], "world 3",
      world3["parity_max_abs_diff"])
PYEOF

# Memory where the parameters outweigh the activations (ResNet-18 at full width, 16 px, batch 2),
# over Gloo, whose reduce-scatter is an alltoall into a copy of each bucket, kept until backward
# ends: the prediction counts them and lands within 10% of the peak (without them it read 1.19).
"$BIN" --strategy=zero1 --gpus=2 --device=cpu --small-input --image-size=16 --batch-size=2 --steps=2 --warmup=2 \
  --no-eval --progress=off --cpu-backend=gloo --out="$TMP/mem.csv"
"$PY" - "$TMP/mem.csv" <<'PYEOF'
import csv, sys
r = list(csv.DictReader(open(sys.argv[1])))[-1]
vs = float(r["memory_vs_expected"].split("/")[0])
assert abs(vs - 1) <= 0.10, (r["peak_mem_mb"], r["memory_expected_mb"], vs)
print("zero1 memory over gloo ok:", r["peak_mem_mb"], r["memory_expected_mb"])
PYEOF

source "$(dirname "${BASH_SOURCE[0]}")/lib/bad_input.sh"
snapshot_results
bad() { bad_input zero1 "$@"; }
G=$(( $(nproc) + 1 ))
bad "--gpus=$G x --threads-per-device=1: $G threads but this machine has" --gpus=$G
bad "--zero-reduce=broadcast: not accepted; accepted values: reduce-scatter|all-reduce" --gpus=2 --zero-reduce=broadcast
bad "--compression=fp16: gradient compression is a ddp option" --gpus=2 --compression=fp16
bad "--grad-accum=2: gradient accumulation is a ddp option" --gpus=2 --grad-accum=2
bad "--bucket-cap-mb=0: must be > 0" --gpus=2 --bucket-cap-mb=0
bad "--gpus=0: must be at least 1" --gpus=0
bad "--optimizer=lamb: not accepted; accepted values: sgd|adam" --gpus=2 --optimizer=lamb
echo "zero1_cli: all checks passed"
