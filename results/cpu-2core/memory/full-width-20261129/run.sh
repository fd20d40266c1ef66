#!/usr/bin/env bash
# memory_vs_expected where the parameters outweigh the activations: ResNet-18 at full width,
# 16 px, batch 2 and 16, 2 CPU devices, every data-parallel strategy over Gloo and shared memory.
#   results/cpu-2core/memory/full-width-20261129/run.sh OUT.csv [BIN=build/ddpbench]
set -euo pipefail
OUT="$1"; BIN="${2:-build/ddpbench}"
for b in 2 16; do
  "$BIN" --strategy=single --gpus=1 --device=cpu --small-input --image-size=16 --batch-size=$b --steps=2 --warmup=2 \
    --no-eval --progress=off --out="$OUT" >/dev/null
  for s in ddp dp zero1 zero2 zero3 hsdp; do
    for be in gloo shm; do
      [[ $s == dp && $be == shm ]] && continue  # dp runs in one process: no collectives backend
      "$BIN" --strategy=$s --gpus=2 --device=cpu --small-input --image-size=16 --batch-size=$b --steps=2 --warmup=2 \
        --no-eval --progress=off --cpu-backend=$be --out="$OUT" >/dev/null
    done
  done
done
