#!/usr/bin/env bash
# Every CPU speed goal of the 2-core VM measured in one set, one rig after
# another on a quiet machine, each rig interleaving its own comparison runs:
#   pmp's own shape against the shapes it weighs (pmp_choice.sh),
#   zero-bubble against 1F1B at 8 micro-batches with a trace of each run
#     (the bubble's parts: bubble_breakdown.py),
#   pmp at 8 micro-batches against torch.distributed.pipelining 1F1B (pmp_vs_torch_1f1b.sh),
#   the ImageFolder loader against torchvision at 1, 2 and 4 workers on
#     400-500 px and 1000-1400 px JPEGs (bench_imagefolder.py; folders IF500, IF1000),
#   ddp and ZeRO against torch DDP, ZeroRedundancyOptimizer and FSDP2, and the
#     lockstep ceiling ddp's scaling is read against (strategies_vs_torch.sh).
#   research/rigs/cpu_goals_set.sh OUTDIR [ROUNDS=3]   (BIN: build/ddpbench)
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
OUTDIR="${1:?usage: cpu_goals_set.sh OUTDIR [ROUNDS]}"; ROUNDS="${2:-3}"
export BIN="${BIN:-$ROOT/build/ddpbench}" PY="${PY:-$ROOT/.venv/bin/python}"
IF500="${IF500:-/tmp/if500}"; IF1000="${IF1000:-/tmp/if1000}"
RIGS="$ROOT/research/rigs"
mkdir -p "$OUTDIR/traces"
step() { echo "== $(date -u +%FT%TZ) $*"; }
step pmp choice
bash "$RIGS/pmp_choice.sh" "$OUTDIR/pmp-choice.csv" "$ROUNDS" > "$OUTDIR/pmp-choice.txt" 2>&1
step zero-bubble against 1f1b, traced
for r in $(seq "$ROUNDS"); do
  for s in 1f1b zero-bubble; do
    "$BIN" --strategy=pmp --gpus=2 --chunks=8 --schedule="$s" --device=cpu --threads-per-device=1 --model=resnet18 \
      --image-size=64 --batch-size=32 --steps=10 --warmup=3 --no-eval --progress=off \
      --trace="$OUTDIR/traces/$s-r$r.json" --out="$OUTDIR/zb-vs-1f1b.csv" --run-id="zb-r$r" --entry="$s" \
      > /dev/null 2>&1 || echo "failed: $s round $r" >&2
  done
done
"$PY" "$RIGS/bubble_breakdown.py" "$OUTDIR"/traces/*.json > "$OUTDIR/bubble-breakdown.txt" 2>&1
step pmp against torch pipelining
bash "$RIGS/pmp_vs_torch_1f1b.sh" "$OUTDIR/pmp-vs-torch-1f1b.csv" "$ROUNDS" > "$OUTDIR/pmp-vs-torch-1f1b.txt" 2>&1
step loader
for set in "$IF500:500:30" "$IF1000:1000:24"; do
  IFS=: read -r dir px batches <<< "$set"
  "$PY" "$RIGS/bench_imagefolder.py" --data="$dir" --binary="$BIN" --workers=1,2,4 --rounds="$ROUNDS" \
    --batches="$batches" --batch-size=64 --out="$OUTDIR/loader-$px.csv" > "$OUTDIR/loader-$px.txt" 2>&1
done
step strategies against torch
bash "$RIGS/strategies_vs_torch.sh" "$OUTDIR/strategies-vs-torch.csv" "$ROUNDS" > "$OUTDIR/strategies-vs-torch.txt" 2>&1
step done
