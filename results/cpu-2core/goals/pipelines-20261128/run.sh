#!/bin/bash
# re-measure the two pipeline goals of the shared-memory issue, quiet
cd /work/main; OUT=${1:-/tmp/m61}; rm -rf $OUT; mkdir -p $OUT/traces
BIN=build/ddpbench; PY=.venv/bin/python
echo "start $(date -u +%FT%TZ) $(git rev-parse --short HEAD)"
for r in 1 2 3; do
  for s in 1f1b zero-bubble; do
    $BIN --strategy=pmp --gpus=2 --chunks=8 --schedule=$s --device=cpu --threads-per-device=1 --model=resnet18 \
      --image-size=64 --batch-size=32 --steps=10 --warmup=3 --no-eval --progress=off \
      --trace=$OUT/traces/$s-r$r.json --out=$OUT/zb-vs-1f1b.csv --run-id=zb-r$r --entry=$s > /dev/null 2>&1 || echo "failed $s $r"
  done
done
$PY research/rigs/bubble_breakdown.py $OUT/traces/*.json > $OUT/bubble-breakdown.txt 2>&1
echo "zb done $(date -u +%FT%TZ)"
bash research/rigs/pmp_vs_torch_1f1b.sh $OUT/pmp-vs-torch-1f1b.csv 3 > $OUT/pmp-vs-torch-1f1b.txt 2>&1
echo "end $(date -u +%FT%TZ)"
