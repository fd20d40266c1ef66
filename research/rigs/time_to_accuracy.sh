#!/usr/bin/env bash
# Seed 001's experiment on this machine: one model trained on Fashion-MNIST
# for a fixed time budget on 1, 2 and 4 ranks (ddp, learning rate scaled by
# the square root of the ranks as seed 001 does: 1.00, 1.41, 2.00 x base),
# 20% of the training set held out for validation, snapshots on; then seed
# 001's table (learning rate, global batch, steps per epoch, mean epoch time,
# epochs reached, scaling efficiency, best validation loss, test loss, top-1
# accuracy) from the rows, by scripts/report.py.
#   research/rigs/time_to_accuracy.sh [BUDGET] [OUT.csv] [-- extra ddpbench flags]
#   e.g. research/rigs/time_to_accuracy.sh 3m results/cpu-2core/training/cpu-2core-seed001.csv
# Ranks beyond the machine's cores are oversubscribed (--oversubscribe; the
# rows say so). The table goes to OUT with .md instead of .csv.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
BIN="${BIN:-$ROOT/build/ddpbench}"
PY="${PY:-$ROOT/.venv/bin/python}"
BUDGET="${1:-3m}"; OUT="${2:-$ROOT/results/seed001.csv}"
shift $(( $# < 2 ? $# : 2 )); [[ "${1:-}" == "--" ]] && shift
RANKS="${RANKS:-1 2 4}"
RUN_ID="${RUN_ID:-seed001-$(date -u +%Y%m%dT%H%M%SZ)}"
SNAPSHOTS="$(mktemp -d)"; trap 'rm -rf "$SNAPSHOTS"' EXIT
MODEL=(--dataset=fashion-mnist --model=resnet18 --width=8 --small-input --batch-size=32 --augment
       --optimizer=adam --lr=0.001 --lr-scaling=sqrt --weight-decay=0.0001 --device=cpu --threads-per-device=1)
for n in $RANKS; do
  strategy=ddp; [[ $n -eq 1 ]] && strategy=single
  extra=(); [[ $n -gt $(nproc) ]] && extra=(--oversubscribe)
  echo "== $n rank(s): $strategy, budget $BUDGET" >&2
  "$BIN" --strategy="$strategy" --gpus="$n" "${MODEL[@]}" --time-budget="$BUDGET" "${extra[@]}" \
    --snapshot-dir="$SNAPSHOTS/$n" --run-id="$RUN_ID" --entry="seed001-${n}rank" --progress=off "$@" --out="$OUT"
done
"$PY" "$ROOT/scripts/report.py" "$OUT" --markdown="${OUT%.csv}.md" >/dev/null
echo "table: ${OUT%.csv}.md" >&2
