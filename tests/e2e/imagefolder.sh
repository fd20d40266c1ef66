#!/usr/bin/env bash
# The ImageFolder dataset end to end on a made-up JPEG folder
# (scripts/make_imagefolder.py): --data-only writes its row with the loader's
# figures; a 2-rank ddp run learns the 4 classes well above chance and its row
# carries data_wait_ms, data_bound_frac, loader_img_s and data_workers; a
# corrupt image stops the run with its name (exit 2, no row) or, with
# --skip-bad-images, is counted in the row; bad layouts and flags get one
# clear message each and leave the results file as it was.
set -euo pipefail
BIN="$1"; SRC="$2"
TMP="$(mktemp -d)"; trap 'rm -rf "$TMP"' EXIT
PY="$SRC/.venv/bin/python"; [[ -x "$PY" ]] || PY=python3
"$PY" -c "import PIL, numpy" 2>/dev/null || { echo "SKIP: Pillow/numpy are not installed"; exit 77; }
fail() { echo "FAIL: $*"; exit 1; }
source "$SRC/tests/e2e/lib/bad_input.sh"

DATA="$TMP/folder"
"$PY" "$SRC/scripts/make_imagefolder.py" --out="$DATA" --classes=4 --train-per-class=24 --val-per-class=6 \
  --min-size=96 --max-size=128 --seed=3 >/dev/null
echo "notes" > "$DATA/train/README.txt"  # a file that is not an image: skipped and counted

COMMON=(--device=cpu --dataset=imagefolder --data-dir="$DATA" --image-size=48 --progress=off)
row() { "$PY" -c 'import csv,sys; r=list(csv.DictReader(open(sys.argv[1])))[-1]; print(r[sys.argv[2]])' "$TMP/r.csv" "$1"; }

# --data-only: the loader alone.
out="$(timeout 120 "$BIN" --strategy=single "${COMMON[@]}" --data-only --data-workers=2 --batch-size=8 --steps=6 --warmup=1 \
  --out="$TMP/r.csv" 2>&1 </dev/null)" || fail "data-only: $out"
grep -q "1 file(s) that are not .jpg, .jpeg or .png left out" <<<"$out" || fail "the skipped file is not in the log: $out"
[[ "$(row strategy)" == data-only ]] || fail "data-only row strategy $(row strategy)"
[[ "$(row data_workers)" == 2 ]] || fail "data-only row data_workers $(row data_workers)"
"$PY" -c "import sys; assert float(sys.argv[1]) > 0, sys.argv[1]" "$(row loader_img_s)" || fail "loader_img_s $(row loader_img_s)"
grep -q "loader stages, ms per image on one worker: read .*, collate .*; $(row data_bound_stage) bounds it" <<<"$out" \
  || fail "no loader stages line naming $(row data_bound_stage): $out"
"$PY" - "$(row data_stage_ms)" "$(row data_bound_stage)" <<'PYEOF' || fail "data_stage_ms $(row data_stage_ms)"
import sys
stages = dict(part.split(":") for part in sys.argv[1].split("/"))
assert list(stages) == ["read", "header", "decode", "resize", "normalise", "collate"], stages
assert max(stages, key=lambda s: float(stages[s])) == sys.argv[2], (stages, sys.argv[2])
PYEOF
echo "ok: --data-only row, loader_img_s $(row loader_img_s), bound by $(row data_bound_stage)"

# 2-rank ddp learns: 4 classes, chance 0.25.
out="$(timeout 300 "$BIN" --strategy=ddp --gpus=2 --oversubscribe "${COMMON[@]}" --model=resnet18 --width=8 \
  --optimizer=adam --lr=0.003 --batch-size=8 --steps=60 --warmup=2 --data-workers=1 --out="$TMP/r.csv" 2>&1 </dev/null)" || fail "ddp: $out"
"$PY" - "$TMP/r.csv" <<'PYEOF' || fail "ddp row: $out"
import csv, sys
r = list(csv.DictReader(open(sys.argv[1])))[-1]
assert r["strategy"] == "ddp" and r["dataset"] == "imagefolder", r["strategy"]
assert float(r["accuracy"]) >= 0.6, f"accuracy {r['accuracy']} (chance 0.25)"
assert r["eval_images"] == "24", r["eval_images"]
assert float(r["data_wait_ms"]) >= 0 and 0 <= float(r["data_bound_frac"]) <= 1, (r["data_wait_ms"], r["data_bound_frac"])
assert float(r["loader_img_s"]) > 0 and r["data_workers"] == "1" and r["bad_images_skipped"] == "", (r["loader_img_s"], r["data_workers"], r["bad_images_skipped"])
print(f"ok: ddp on 2 ranks, accuracy {r['accuracy']}, data_bound_frac {r['data_bound_frac']}")
PYEOF
snapshot_results

# A corrupt image: exit 2 naming it, no row; skipped and counted with --skip-bad-images.
first="$(ls "$DATA/train/class_001" | head -1)"
head -c "$(( $(stat -c %s "$DATA/train/class_001/$first") / 2 ))" "$DATA/train/class_001/$first" > "$TMP/cut.jpg" && mv "$TMP/cut.jpg" "$DATA/train/class_001/$first"
bad_input single "class_001/$first: truncated JPEG" --warmup=1 --batch-size=96
out="$(timeout 120 "$BIN" --strategy=single "${COMMON[@]}" --skip-bad-images --batch-size=96 --steps=2 --warmup=1 \
  --out="$TMP/r.csv" 2>&1 </dev/null)" || fail "skip-bad-images: $out"
[[ "$(row bad_images_skipped)" -ge 3 ]] || fail "bad_images_skipped $(row bad_images_skipped) (want >= 3: one per batch of the whole train set)"
echo "ok: corrupt image named, then skipped and counted ($(row bad_images_skipped))"
snapshot_results

# Bad layouts and flags: one message each, no row.
COMMON=(--device=cpu --dataset=imagefolder --image-size=48 --progress=off)
mkdir -p "$TMP/empty/train/cat" "$TMP/empty/train/dog" "$TMP/empty/val/cat"
cp "$DATA/val/class_000/"*.jpg "$TMP/empty/train/cat/"; cp "$DATA/val/class_000/"*.jpg "$TMP/empty/val/cat/"
bad_input single "train/dog: class folder with no .jpg, .jpeg or .png files" --data-dir="$TMP/empty"
mkdir -p "$TMP/empty/val/cow" && cp "$DATA/val/class_000/"*.jpg "$TMP/empty/train/dog/" && cp "$DATA/val/class_000/"*.jpg "$TMP/empty/val/cow/"
bad_input single "class 'cow' is not one of train/'s 2 classes" --data-dir="$TMP/empty"
mkdir -p "$TMP/none/train"
bad_input single "train: no class folders" --data-dir="$TMP/none"
bad_input single "no such folder" --data-dir="$TMP/missing"
bad_input single "--data-workers=-1" --data-dir="$DATA" --data-workers=-1
bad_input single "--decode=gpu with --device=cpu: GPU decode runs on a CUDA device" --data-dir="$DATA" --decode=gpu
if [[ ! -e /dev/nvidiactl ]]; then  # no GPU: --device=auto resolves to the CPU, and the same refusal follows
  COMMON=(--dataset=imagefolder --image-size=48 --progress=off)
  bad_input single "--decode=gpu with --device=cpu: GPU decode runs on a CUDA device" --data-dir="$DATA" --decode=gpu --device=auto
  COMMON=(--device=cpu --dataset=imagefolder --image-size=48 --progress=off)
fi
bad_input single "--decode=vpu" --data-dir="$DATA" --decode=vpu
COMMON=(--device=cpu --dataset=synthetic --image-size=32 --progress=off)
bad_input single "only --dataset=imagefolder decodes images" --data-workers=2
bad_input single "--decode=gpu: only --dataset=imagefolder decodes images" --decode=gpu
echo "imagefolder: all passed"
