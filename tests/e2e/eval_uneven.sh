#!/usr/bin/env bash
# Evaluation keeps ranks in step whatever test batches each rank holds:
# a test set of one image (ranks with no batch at all) on 2 and 3
# ranks, and an uneven one (5 images, batch 2, 2 ranks: shares of 3 and 2, so
# 2 batches against 1), for every multi-rank strategy (ddp, zero1, zero2,
# zero3, whose Predict gathers parameters). Each run must write its row, and
# the row must say every test image was evaluated exactly once. Each row also
# says where NCCL's bootstrap would listen: loopback for ranks spawned on one
# host, unless NCCL_SOCKET_IFNAME was set.
set -euo pipefail
BIN="$1"; SRC="$2"
TMP="$(mktemp -d)"; trap 'rm -rf "$TMP"' EXIT
PY="$SRC/.venv/bin/python"; [[ -x "$PY" ]] || PY=python3
fail() { echo "FAIL: $*"; exit 1; }

"$PY" "$SRC/tests/e2e/lib/make_idx.py" "$TMP/one" 64 1
"$PY" "$SRC/tests/e2e/lib/make_idx.py" "$TMP/five" 64 5

run() {  # STRATEGY RANKS DATA BATCH EXPECTED_IMAGES
  local out rc
  set +e
  # --expected=off: no expectation is checked here; it would double each run's time.
  out="$(timeout 180 "$BIN" --strategy="$1" --gpus="$2" --oversubscribe --device=cpu --dataset=mnist \
    --data-dir="$TMP/$3" --small-input --width=4 --batch-size="$4" --steps=2 --warmup=1 --progress=off \
    --expected=off --out="$TMP/r.csv" 2>&1 </dev/null)"
  rc=$?; set -e
  [[ $rc -eq 0 ]] || fail "$1 on $2 ranks, $3 test image(s): exit $rc: $out"
  "$PY" - "$TMP/r.csv" "$5" "$1 $2 ranks $3" <<'PYEOF' || fail "$1 on $2 ranks ($3): row check"
import csv, sys
row = list(csv.DictReader(open(sys.argv[1])))[-1]
assert row["eval_images"] == sys.argv[2], (sys.argv[3], row["eval_images"])
assert row["nccl_socket_ifname"] == "lo (loopback)", (sys.argv[3], row["nccl_socket_ifname"])
acc = float(row["accuracy"])
assert 0 <= acc <= 1 and abs(acc * int(sys.argv[2]) - round(acc * int(sys.argv[2]))) < 1e-3, (sys.argv[3], acc)
PYEOF
  echo "ok: $1 on $2 ranks, $3 test image(s)"
}

for s in ddp zero1 zero2 zero3; do
  run "$s" 2 one 8 1
  run "$s" 3 one 8 1
  run "$s" 2 five 2 5
done
out="$(NCCL_SOCKET_IFNAME=ib7 timeout 120 "$BIN" --strategy=ddp --gpus=2 --device=cpu --small-input --width=4 \
  --image-size=28 --batch-size=8 --steps=2 --warmup=1 --progress=off --out="$TMP/u.csv" 2>&1 </dev/null)" || fail "$out"
"$PY" -c 'import csv,sys; r=list(csv.DictReader(open(sys.argv[1])))[-1]; assert r["nccl_socket_ifname"]=="ib7 (user)", r["nccl_socket_ifname"]' \
  "$TMP/u.csv" || fail "the user's NCCL_SOCKET_IFNAME is not the row's"
echo "eval_uneven: all passed"
