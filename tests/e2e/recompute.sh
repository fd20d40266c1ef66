#!/usr/bin/env bash
# Activation recompute (--recompute) keeps the maths: every strategy run
# with every unit recomputed ends, after a few steps, with the same tensors
# bit for bit (parameters, BatchNorm's running statistics, optimizer state:
# every tensor of the final snapshot but ddp's bucket layout) as the same
# run without recompute;
# the row names the recomputed units and counts their second forward in
# hardware_tflops_per_img. Bad values: one error line, exit 2, no row.
set -euo pipefail
BIN="$1"; SRC="$2"
TMP="$(mktemp -d)"; trap 'rm -rf "$TMP"' EXIT
PY="$SRC/.venv/bin/python"; [[ -x "$PY" ]] || PY=python3
fail() { echo "FAIL: $*"; exit 1; }
source "$SRC/tests/e2e/lib/same_tensors.sh"

"$PY" "$SRC/tests/e2e/lib/make_idx.py" "$TMP/data" 96 16 1
# --expected=off: no expectation is checked here (the *_cli tests and e2e.docs run
# that calibration); it would double the time of each small multi-rank run.
BASE=(--device=cpu --dataset=mnist --data-dir="$TMP/data" --small-input --width=4 --batch-size=8 --steps=3
      --warmup=1 --progress=off --optimizer=adam --lr=0.003 --no-eval --oversubscribe --expected=off)
COMMON=("${BASE[@]}" --snapshot-every=2)

# Runs NAME without and with RECOMPUTE, compares every rank's final snapshot.
same_with_recompute() {
  local name="$1" recompute="$2"; shift 2
  for mode in none "$recompute"; do
    "$BIN" "${COMMON[@]}" "$@" --recompute="$mode" --snapshot-dir="$TMP/$name-$mode" --out="$TMP/$name.csv" \
      > "$TMP/$name-$mode.log" 2>&1 || fail "$name --recompute=$mode: $(tail -3 "$TMP/$name-$mode.log")"
  done
  local n=0 step
  step="$(ls "$TMP/$name-none"/*-step*.json | sed 's/.*-step\([0-9]*\)\.json/\1/' | sort | tail -1)"
  for a in "$TMP/$name-none"/*-step"$step".rank*.pt; do
    local b; b="$(ls "$TMP/$name-$recompute"/*-step"$step".rank"${a##*.rank}")"
    same_tensors_later "$name: --recompute=$recompute changed ${a##*/}" "$a" "$b"
    n=$((n + 1))
  done
  ((n > 0)) || fail "$name: no final snapshot"
  "$PY" - "$TMP/$name.csv" "$recompute" "$name" <<'PYEOF'
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1])))
plain, redo = rows[-2], rows[-1]
want = sys.argv[2]
assert plain["recompute"] == "none", plain["recompute"]
assert redo["recompute"] == ("all" if want == "all" else redo["recompute"]) and redo["recompute"] not in ("", "none"), redo["recompute"]
m, h = float(redo["model_tflops_per_img"]), float(redo["hardware_tflops_per_img"])
assert plain["hardware_tflops_per_img"] == plain["model_tflops_per_img"], (plain["hardware_tflops_per_img"], plain["model_tflops_per_img"])
# every unit once more forward: 4 passes of 3 (exactly, for all)
if want == "all": assert abs(h / m - 4 / 3) < 1e-4, (h, m)
else: assert m < h < 4 / 3 * m, (h, m)
print(f"{sys.argv[3]}: recompute={redo['recompute']}; hardware/model FLOPs {h / m:.4f}")
PYEOF
}

same_with_recompute single all --strategy=single
same_with_recompute ddp all --strategy=ddp --gpus=2
same_with_recompute ddp-list "layer2,every-3,head" --strategy=ddp --gpus=2
same_with_recompute dp all --strategy=dp --gpus=2
same_with_recompute zero2 all --strategy=zero2 --gpus=2
same_with_recompute zero3 all --strategy=zero3 --gpus=2
same_with_recompute mp all --strategy=mp --gpus=2 --split=5,5
same_with_recompute pmp all --strategy=pmp --gpus=2 --split=5,5 --units=blocks --chunks=4 --schedule=1f1b --rebalance=off
same_with_recompute pmp-halves "layer3.1a,layer4" --strategy=pmp --gpus=2 --units=half-blocks --split=9,9 --chunks=4 \
  --schedule=gpipe --rebalance=off
same_with_recompute pmp-ranks all --strategy=pmp --stage-ranks --gpus=2 --split=5,5 --units=blocks --chunks=4 \
  --schedule=1f1b --rebalance=off
# Every pair at once (one torch import); ddp's bucket layout follows the order
# gradients became ready, which recompute changes.
check_same_tensors "a run with recompute ended with other tensors than the same run without" \
  --ignore=ddp.bucket_params

# --- bad values: one line naming the value, exit 2, no row -----------------
bad() {
  local want="$1"; shift
  set +e
  "$BIN" "${BASE[@]}" "$@" --out="$TMP/bad.csv" > "$TMP/bad.log" 2>&1
  local rc=$?
  set -e
  [[ $rc -eq 2 ]] || fail "$* exited $rc, not 2: $(cat "$TMP/bad.log")"
  grep -q -- "$want" "$TMP/bad.log" || fail "$*: no '$want' in: $(cat "$TMP/bad.log")"
  [[ ! -e "$TMP/bad.csv" ]] || fail "$*: wrote a row"
}
bad "--recompute=layer9: 'layer9' names no unit" --strategy=single --recompute=layer9
bad "'every-0' names no unit" --strategy=single --recompute=every-0
bad "--memory-budget-mb=-5" --strategy=single --memory-budget-mb=-5
bad "--memory-budget-mb=64 with --recompute=all" --strategy=single --memory-budget-mb=64 --recompute=all
bad "--recompute=all with --schedule=zero-bubble" --strategy=pmp --gpus=2 --schedule=zero-bubble --recompute=all
echo "recompute: every strategy bit-identical with its units recomputed; bad values refused"
