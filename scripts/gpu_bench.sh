#!/usr/bin/env bash
# The GPU matrix of issue 9, for a machine with CUDA (see scripts/gpu_build.sh):
# every strategy on ResNet-50 and ResNet-18 at bf16/fp16/off, appended to
# results/gpu-<host>.csv, then ddpbench single against PyTorch eager
# (scripts/compare_pytorch.sh, interleaved) on the issue's workloads.
#   scripts/gpu_build.sh build && scripts/gpu_bench.sh [OUT_DIR]
# Multi-GPU strategies use every visible GPU; on a 1-GPU machine they run 2
# oversubscribed ranks/stages (the row says oversubscribed=true).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"; cd "$ROOT"
OUT_DIR="${1:-results}"
BIN="${BIN:-$ROOT/build-gpu/ddpbench}"
[[ -x "$BIN" ]] || { echo "gpu_bench.sh: $BIN is missing; run scripts/gpu_build.sh build first" >&2; exit 2; }
export LD_LIBRARY_PATH="$ROOT/.deb/root/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
NGPU="$(python3 -c 'import torch; print(torch.cuda.device_count())')"
(( NGPU >= 1 )) || { echo "gpu_bench.sh: no CUDA device visible" >&2; exit 2; }
GPUS=$(( NGPU >= 2 ? NGPU : 2 )); OVER=(); (( NGPU >= 2 )) || OVER=(--oversubscribe)
CSV="$OUT_DIR/gpu-$(hostname).csv"
run() { echo "+ ddpbench $*"; "$BIN" --device=cuda --progress=off --out="$CSV" "$@" || echo "FAILED ($?): $*"; }
for model in resnet50 resnet18; do
  for amp in bf16 fp16 off; do
    common=(--model="$model" --amp="$amp" --image-size=224 --batch-size=128 --steps=40 --warmup=15)
    run --strategy=single "${common[@]}"
    for s in dp ddp mp pmp zero1; do run --strategy="$s" --gpus="$GPUS" "${OVER[@]}" "${common[@]}"; done
  done
done
run --strategy=ddp --gpus=1 --model=resnet50 --amp=bf16 --image-size=224 --batch-size=128 --steps=40 --warmup=15
export OUT="$OUT_DIR/compare_pytorch.csv" BIN
for w in "resnet50 256" "resnet18 256" "resnet18 64"; do
  set -- $w
  scripts/compare_pytorch.sh 3 -- --device=cuda --model="$1" --batch-size="$2" --image-size=224 --amp=bf16 \
    --memory-format=channels_last --steps=40 --warmup=15
done
