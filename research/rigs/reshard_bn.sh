#!/usr/bin/env bash
# BatchNorm across a world change, measured: Fashion-MNIST (BatchNorm, --small-input,
# --width=8, Adam), 3 seeds each of
#   uninterrupted: ddp on 2 ranks for STEPS steps (global batch 64);
#   dropped:       ddp on 2 ranks for STEPS/2 steps, then resumed from its snapshot
#                  on 1 rank (per-device batch 32 -> 64, the global batch kept).
# BatchNorm's statistics are taken over the per-device batch, so the two differ in
# more than round-off; the question is whether the accuracy stays within the
# run-to-run spread. Rows go to OUT.csv (each carries its command); a summary to stdout.
#   research/rigs/reshard_bn.sh results/cpu-2core/training/reshard_bn.csv [STEPS]
set -euo pipefail
OUT="$1"; STEPS="${2:-200}"
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
BIN="$ROOT/build/ddpbench"
TMP="$(mktemp -d)"; trap 'rm -rf "$TMP"' EXIT
COMMON=(--device=cpu --dataset=fashion-mnist --small-input --width=8 --batch-size=32 --optimizer=adam --lr=0.003
        --warmup=0 --progress=off --snapshot-every=50)
HALF=$((STEPS / 2))
for seed in 1 2 3; do
  "$BIN" "${COMMON[@]}" --seed="$seed" --strategy=ddp --gpus=2 --steps="$STEPS" --run-id="uninterrupted-s$seed" --out="$OUT" \
    --snapshot-dir="$TMP/u$seed" 2>"$TMP/log" || { tail -3 "$TMP/log"; exit 1; }
  "$BIN" "${COMMON[@]}" --seed="$seed" --strategy=ddp --gpus=2 --steps="$HALF" --no-eval --run-id="half-s$seed" \
    --snapshot-dir="$TMP/d$seed" --out=/dev/null 2>"$TMP/log" || { tail -3 "$TMP/log"; exit 1; }
  "$BIN" "${COMMON[@]}" --seed="$seed" --strategy=ddp --gpus=1 --steps="$STEPS" --run-id="dropped-s$seed" --out="$OUT" \
    --snapshot-dir="$TMP/d$seed" 2>"$TMP/log" || { tail -3 "$TMP/log"; exit 1; }
done
python3 - "$OUT" <<'PYEOF'
import csv, statistics, sys
rows = [r for r in csv.DictReader(open(sys.argv[1])) if r["run_id"].split("-")[0] in ("uninterrupted", "dropped")]
for kind in ("uninterrupted", "dropped"):
    acc = [float(r["accuracy"]) for r in rows if r["run_id"].startswith(kind)][-3:]
    print(f"{kind:13s} accuracy {' '.join(f'{a:.4f}' for a in acc)}  mean {statistics.mean(acc):.4f}"
          f"  spread (max-min) {max(acc) - min(acc):.4f}")
PYEOF
