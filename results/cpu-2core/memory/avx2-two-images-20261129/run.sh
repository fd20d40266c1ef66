#!/usr/bin/env bash
# The full-width memory rows at 1, 2, 4 and 8 images a backward on an AVX2-only CPU:
# peak against the prediction (memory_vs_expected). Run from the repository root:
#   results/cpu-2core/memory/avx2-two-images-20261129/run.sh OUT.csv
set -euo pipefail
OUT="$1"; B=build/ddpbench
M=(--device=cpu --small-input --image-size=16 --steps=2 --warmup=2 --no-eval --progress=off)
while read -r flags; do
  # shellcheck disable=SC2086  # flags is a list
  "$B" $flags "${M[@]}" --out="$OUT" > /dev/null 2>&1
done <<'LIST'
--strategy=single --batch-size=1 --threads-per-device=1
--strategy=single --batch-size=2 --threads-per-device=1
--strategy=single --batch-size=2 --threads-per-device=2
--strategy=single --batch-size=4 --threads-per-device=2
--strategy=single --batch-size=8 --threads-per-device=1
--strategy=ddp --gpus=2 --gradient-as-bucket-view --batch-size=2
--strategy=ddp --gpus=2 --gradient-as-bucket-view --batch-size=4
--strategy=ddp --gpus=2 --gradient-as-bucket-view --batch-size=4 --grad-accum=2
--strategy=ddp --gpus=2 --gradient-as-bucket-view --batch-size=8 --grad-accum=2
--strategy=ddp --gpus=2 --batch-size=16 --grad-accum=4
--strategy=zero1 --gpus=2 --cpu-backend=gloo --batch-size=2
LIST
