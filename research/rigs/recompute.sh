#!/usr/bin/env bash
# Activation recompute measured: for each strategy, --recompute=none and
# --recompute=all (peak memory and step time), and for single and ddp
# --recompute=auto under budgets that force partial plans (the plan's
# predicted added forward time from the log against the measured step
# time over none's). Interleaved rounds, the order reversed every other
# round; rows appended to OUT.csv (entry names the configuration), the log
# lines with the plans to OUT.plans.
#   research/rigs/recompute.sh OUT.csv [ROUNDS=3]   (BIN: build/ddpbench)
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
OUT="${1:?usage: recompute.sh OUT.csv [ROUNDS]}"; ROUNDS="${2:-3}"
BIN="${BIN:-$ROOT/build/ddpbench}"; PY="${PY:-$ROOT/.venv/bin/python}"
W=(--device=cpu --model=resnet50 --small-input --width=16 --image-size=32 --batch-size=64 --steps=6 --warmup=2
   --no-eval --progress=off --expected=off)
entries=(
  "single-none:--strategy=single --recompute=none"
  "single-all:--strategy=single --recompute=all"
  "single-b300:--strategy=single --memory-budget-mb=300"
  "single-b220:--strategy=single --memory-budget-mb=220"
  "ddp-none:--strategy=ddp --gpus=2 --recompute=none"
  "ddp-all:--strategy=ddp --gpus=2 --recompute=all"
  "ddp-b300:--strategy=ddp --gpus=2 --memory-budget-mb=300"
  "pmp-none:--strategy=pmp --gpus=2 --split=9,9 --chunks=8 --schedule=1f1b --rebalance=off --recompute=none"
  "pmp-all:--strategy=pmp --gpus=2 --split=9,9 --chunks=8 --schedule=1f1b --rebalance=off --recompute=all")
: > "$OUT.plans"
for r in $(seq "$ROUNDS"); do
  order=("${entries[@]}")
  if ((r % 2 == 0)); then order=(); for ((i=${#entries[@]}-1; i>=0; i--)); do order+=("${entries[i]}"); done; fi
  for e in "${order[@]}"; do
    # shellcheck disable=SC2086  # the flags are words
    OMP_NUM_THREADS=1 "$BIN" "${W[@]}" ${e#*:} --entry="${e%%:*}" --run-id=recompute --out="$OUT" 2>&1 \
      | { grep "recompute plan" || true; } | sed "s/^/${e%%:*} /" >> "$OUT.plans"
  done
done
"$PY" - "$OUT" "$OUT.plans" <<'PY'
import collections, csv, re, statistics, sys
rows = collections.defaultdict(list)
for r in csv.DictReader(open(sys.argv[1])):
    if r["run_id"] == "recompute": rows[r["entry"]].append(r)
med = lambda e, k: statistics.median(float(x[k]) for x in rows[e])
plans = collections.defaultdict(list)
for line in open(sys.argv[2]):
    m = re.search(r"forward run again ([0-9.]+) ms", line)
    if m: plans[line.split()[0]].append(float(m.group(1)))
print(f"{'entry':14} {'peak MB':>8} {'vs none':>8} {'step ms':>8} {'added':>8} {'predicted':>9}  recompute")
for e in rows:
    base = e.split("-")[0] + "-none"
    added = med(e, "step_ms_p50") - med(base, "step_ms_p50")
    pred = f"{statistics.median(plans[e]):9.1f}" if plans.get(e) else " " * 9
    print(f"{e:14} {med(e, 'peak_mem_mb'):8.1f} {med(e, 'peak_mem_mb') / med(base, 'peak_mem_mb'):8.3f} "
          f"{med(e, 'step_ms_p50'):8.1f} {added:8.1f} {pred}  {rows[e][-1]['recompute']}")
PY
