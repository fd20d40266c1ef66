#!/bin/bash
# The two pipeline goals of the shared-memory/overlap work, with and without
# --overlap-optimizer: 1f1b and zero-bubble at 8 micro-batches, each run
# traced, interleaved rounds (order reversed every other round), then pmp
# (also with the flag) against torch pipelining's 1F1B cuts. Quiet machine.
#   bash results/cpu-2core/goals/pipelines-overlap-20261128/run.sh OUTDIR [ZB_ROUNDS=6] [TORCH_ROUNDS=3]
cd "$(dirname "$0")/../../../.." || exit 1
OUT=${1:-/tmp/m61o}; ZB_ROUNDS=${2:-6}; TORCH_ROUNDS=${3:-3}; rm -rf "$OUT"; mkdir -p "$OUT/traces"
BIN=build/ddpbench; PY=.venv/bin/python
echo "start $(date -u +%FT%TZ) $(git rev-parse --short HEAD)"
entries=(1f1b-off zero-bubble-off 1f1b-on zero-bubble-on)
for r in $(seq "$ZB_ROUNDS"); do
  order=("${entries[@]}")
  if (( r % 2 == 0 )); then order=(zero-bubble-on 1f1b-on zero-bubble-off 1f1b-off); fi
  for e in "${order[@]}"; do
    s=${e%-*}; flag=""; [[ $e == *-on ]] && flag=--overlap-optimizer
    $BIN --strategy=pmp --gpus=2 --chunks=8 --schedule=$s --device=cpu --threads-per-device=1 --model=resnet18 \
      --image-size=64 --batch-size=32 --steps=10 --warmup=3 --no-eval --progress=off $flag \
      --trace=$OUT/traces/$e-r$r.json --out=$OUT/zb-vs-1f1b.csv --run-id=$e-r$r --entry=$e > /dev/null 2>&1 || echo "failed $e $r"
  done
done
$PY research/rigs/bubble_breakdown.py $OUT/traces/*.json > $OUT/bubble-breakdown.txt 2>&1
$PY - "$OUT/zb-vs-1f1b.csv" > $OUT/bubble-ratios.txt <<'PY'
import collections, csv, statistics, sys
by = collections.defaultdict(list)
for r in csv.DictReader(l for l in open(sys.argv[1]) if not l.startswith("#")):
    by[r["entry"]].append((float(r["bubble_measured"]), float(r["throughput_img_s"])))
med = {e: statistics.median(b for b, _ in v) for e, v in by.items()}
for e, v in sorted(by.items()):
    print(f"{e:16s} bubble_measured {' '.join(f'{b:.3f}' for b, _ in v)} (median {med[e]:.3f}); img/s "
          f"{' '.join(f'{t:.1f}' for _, t in v)}")
for f in ("off", "on"):
    print(f"zero-bubble / 1f1b bubble, both --overlap-optimizer {f}: {med['zero-bubble-' + f] / med['1f1b-' + f]:.3f}")
print(f"zero-bubble with the flag / 1f1b without: {med['zero-bubble-on'] / med['1f1b-off']:.3f}")
PY
echo "zb done $(date -u +%FT%TZ)"
bash research/rigs/pmp_vs_torch_1f1b.sh $OUT/pmp-vs-torch-1f1b.csv "$TORCH_ROUNDS" > $OUT/pmp-vs-torch-1f1b.txt 2>&1
echo "end $(date -u +%FT%TZ)"
