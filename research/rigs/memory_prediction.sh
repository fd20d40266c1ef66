#!/usr/bin/env bash
# The row's memory prediction (memory_expected_mb, from the projection's
# memory model on a profile measured after the run) against the measured
# peak (peak_mem_mb: the fullest device's tracked tensor bytes), for every
# strategy (single: from the bytes alone), at three batch sizes and two
# models. Appends rows to OUT.csv and prints |memory_vs_expected - 1| by
# strategy (median, largest) and overall, over every row of OUT.csv.
#   research/rigs/memory_prediction.sh OUT.csv   (BIN: build/ddpbench;
#   ONLY=WORD: only the strategies whose entry contains WORD)
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
OUT="${1:?usage: memory_prediction.sh OUT.csv}"
BIN="${BIN:-$ROOT/build/ddpbench}"; PY="${PY:-$ROOT/.venv/bin/python}"
strategies=("single" "ddp --gpus=2" "zero1 --gpus=2" "zero2 --gpus=2" "zero3 --gpus=2" "dp --gpus=2" "mp --gpus=2"
            "pmp --gpus=2 --schedule=1f1b --chunks=4" "pmp --gpus=2 --stage-ranks --schedule=1f1b --chunks=4")
for model in "resnet18 --width=16" "resnet50 --width=8"; do
  for b in 16 32 64; do
    for s in "${strategies[@]}"; do
      [[ -n "${ONLY:-}" && "$s" != *"$ONLY"* ]] && continue
      # shellcheck disable=SC2086  # the flags are words
      OMP_NUM_THREADS=1 "$BIN" --device=cpu --model=$model --small-input --image-size=32 --batch-size=$b --steps=3 \
        --warmup=1 --no-eval --progress=off --strategy=$s --run-id=memory-prediction --out="$OUT" > /dev/null 2>&1 \
        || echo "failed: $model $b $s" >&2
    done
  done
done
"$PY" - "$OUT" <<'PY'
import collections, csv, statistics, sys
err = collections.defaultdict(list)
for r in csv.DictReader(open(sys.argv[1])):
    if r["run_id"] == "memory-prediction" and r["memory_vs_expected"]:
        name = r["strategy"] + (" --stage-ranks" if "--stage-ranks" in r["command"] else "")
        err[name].append(abs(float(r["memory_vs_expected"]) - 1))
every = [e for v in err.values() for e in v]
for name, v in sorted(err.items()):
    print(f"{name:22} median {100 * statistics.median(v):5.1f}%  largest {100 * max(v):5.1f}%  ({len(v)} runs)")
print(f"{'all':22} median {100 * statistics.median(every):5.1f}%  largest {100 * max(every):5.1f}%  ({len(every)} runs)")
PY
