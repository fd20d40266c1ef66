#!/bin/bash
# pmp --stage-ranks (2 ranks x 1 thread, ResNet-18 64 px, batch 32, 8 micro-batches) with its
# stage hand-offs over Gloo against the shared-memory mailboxes, ABBA-interleaved rounds.
#   bash results/cpu-2core/shm/stage-ranks-p2p.sh OUT.csv [ROUNDS=6]
cd "$(dirname "$0")/../../.." || exit 1
OUT=${1:?usage: stage-ranks-p2p.sh OUT.csv [ROUNDS]}; ROUNDS=${2:-6}
for r in $(seq "$ROUNDS"); do
  order=(gloo shm); (( r % 2 == 0 )) && order=(shm gloo)
  for b in "${order[@]}"; do
    for s in 1f1b zero-bubble; do
      build/ddpbench --strategy=pmp --gpus=2 --stage-ranks --cpu-backend=$b --chunks=8 --schedule=$s --split=13,5 \
        --units=half-blocks --device=cpu --threads-per-device=1 --model=resnet18 --image-size=64 --batch-size=32 \
        --steps=10 --warmup=3 --no-eval --progress=off --out="$OUT" --run-id=$s-$b-r$r --entry=$s-$b >/dev/null 2>&1 ||
        echo "failed $s $b $r"
    done
  done
done
.venv/bin/python - "$OUT" <<'PY'
import collections, csv, statistics, sys
by = collections.defaultdict(list)
for r in csv.DictReader(l for l in open(sys.argv[1]) if not l.startswith("#")):
    by[r["entry"]].append(float(r["throughput_img_s"]))
for e, v in sorted(by.items()):
    print(f"{e:18s} median {statistics.median(v):6.1f} img/s ({', '.join(f'{x:.1f}' for x in v)})")
for s in ("1f1b", "zero-bubble"):
    print(f"{s}: shm / gloo = {statistics.median(by[s + '-shm']) / statistics.median(by[s + '-gloo']):.3f}")
PY
