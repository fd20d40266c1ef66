#!/usr/bin/env bash
# --export=FILE.pt: the weights of torchvision's architecture (3-channel
# input, standard stem and width) load into torchvision's resnet18 (trained
# by zero2 on 2 ranks: gathered) and resnet50 with strict=True through plain
# torch.load; a Fashion-MNIST run with --small-input, --width=8 and 1-channel
# data gets FILE.pt.json naming the modules to replace, and
# scripts/check_export.py, replacing them, gets the row's test accuracy
# within 1e-3; so does pmp --stage-ranks on 2 ranks cut inside a block (each
# stage's weights and BatchNorm statistics gathered from the rank that ran it,
# named as the whole block). An unwritable path or --data-only is refused
# before the run.
set -euo pipefail
BIN="$1"; SRC="$2"
TMP="$(mktemp -d)"; trap 'rm -rf "$TMP"' EXIT
PY="$SRC/.venv/bin/python"; [[ -x "$PY" ]] || PY=python3
fail() { echo "FAIL: $*"; exit 1; }
"$PY" -c "import torchvision" 2>/dev/null || { echo "SKIP: torchvision is not installed"; exit 77; }

# --expected=off: no expectation is checked here (the *_cli tests and e2e.docs run
# that calibration); it would double the time of each small multi-rank run.
COMMON=(--device=cpu --progress=off --warmup=0 --expected=off)
"$BIN" "${COMMON[@]}" --model=resnet18 --image-size=64 --batch-size=4 --steps=1 --num-classes=10 --strategy=zero2 \
  --gpus=2 --export="$TMP/r18.pt" 2>"$TMP/r18.log" || fail "resnet18 run: $(tail -3 "$TMP/r18.log")"
"$BIN" "${COMMON[@]}" --model=resnet50 --image-size=64 --batch-size=4 --steps=1 --num-classes=7 \
  --export="$TMP/r50.pt" 2>"$TMP/r50.log" || fail "resnet50 run: $(tail -3 "$TMP/r50.log")"
[[ ! -e "$TMP/r18.pt.json" && ! -e "$TMP/r50.pt.json" ]] || fail "a standard architecture got a replacement list"
"$PY" - "$TMP" <<'PYEOF' || fail "torchvision did not load the exports with strict=True"
import sys, torch, torchvision
for name, classes in (("r18", 10), ("r50", 7)):
    model = getattr(torchvision.models, {"r18": "resnet18", "r50": "resnet50"}[name])(num_classes=classes)
    print(name, model.load_state_dict(torch.load(f"{sys.argv[1]}/{name}.pt"), strict=True))
PYEOF

DATA=/usr/share/datasets/fashion-mnist
same_accuracy() {  # ROW_CSV "accuracy A over N images": the export's accuracy is the row's within 1e-3
  "$PY" - "$1" "$2" <<'PYEOF' || fail "the export's accuracy differs from the row's ($1)"
import csv, sys
row = float(list(csv.DictReader(open(sys.argv[1])))[-1]["accuracy"])
got = float(sys.argv[2].split()[1])
print(f"row accuracy {row:.4f}, export's {got:.4f} ({sys.argv[2].split()[-2]} images)")
assert abs(row - got) <= 1e-3
PYEOF
}
if [[ -e "$DATA/t10k-images-idx3-ubyte.gz" || -e "$DATA/t10k-images-idx3-ubyte" ]]; then
  "$BIN" "${COMMON[@]}" --dataset=fashion-mnist --small-input --width=8 --batch-size=32 --steps=30 --optimizer=adam \
    --lr=0.003 --eval-batches=20 --export="$TMP/fm.pt" --out="$TMP/fm.csv" 2>"$TMP/fm.log" || fail "fashion-mnist run: $(tail -3 "$TMP/fm.log")"
  grep -q '"maxpool": "Identity()"' "$TMP/fm.pt.json" || fail "the replacement list lacks the max-pool"
  images="$("$PY" -c 'import csv,sys; print(list(csv.DictReader(open(sys.argv[1])))[-1]["eval_images"])' "$TMP/fm.csv")"
  got="$("$PY" "$SRC/scripts/check_export.py" "$TMP/fm.pt" --data-dir="$DATA" --mean=0.2860 --std=0.3530 \
    --images="$images")" ||
    fail "check_export: $got"
  same_accuracy "$TMP/fm.csv" "$got"
  "$BIN" "${COMMON[@]}" --dataset=fashion-mnist --small-input --width=8 --batch-size=32 --steps=10 --optimizer=adam \
    --lr=0.003 --eval-batches=20 --strategy=pmp --gpus=2 --stage-ranks --units=half-blocks --split=2,16 --export="$TMP/pp.pt" \
    --out="$TMP/pp.csv" 2>"$TMP/pp.log" || fail "pmp --stage-ranks run: $(tail -3 "$TMP/pp.log")"
  got="$("$PY" "$SRC/scripts/check_export.py" "$TMP/pp.pt" --data-dir="$DATA" --mean=0.2860 --std=0.3530 \
    --images="$images")" || fail "check_export (pmp --stage-ranks): $got"
  same_accuracy "$TMP/pp.csv" "$got"
else
  echo "note: $DATA absent (Debian package dataset-fashion-mnist); its accuracy check skipped"
fi

for bad in "--export=$TMP/nowhere/x.pt|--export=$TMP/nowhere/x.pt: directory" \
           "--export=$TMP/y.pt --data-only|--export=$TMP/y.pt: --data-only trains no model"; do
  flags="${bad%%|*}"; want="${bad#*|}"
  set +e; out="$("$BIN" "${COMMON[@]}" --image-size=32 --batch-size=4 --steps=1 $flags 2>&1)"; rc=$?; set -e
  [[ $rc -eq 2 ]] || fail "$flags exited $rc (want 2): $out"
  grep -q "ddpbench: error: $want" <<<"$out" || fail "$flags: message lacks '$want': $out"
done
echo "export: all checks passed"
