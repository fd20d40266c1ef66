#!/usr/bin/env bash
# The search against the exhaustive grid on one space: scripts/search.py
# --exhaustive measures every configuration (the grid: its medians and the
# model's Kendall tau over all of them), then REPEATS searches, each
# calibrating afresh and measuring its top 3, each pick's grid median
# against the grid's best; wall time of each. Then one search under a
# device memory that rules out the unconstrained winner. Everything under
# OUT_DIR; a summary on stdout.
#   research/rigs/search_vs_grid.sh OUT_DIR [REPEATS=5]   (BIN: build/ddpbench)
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
OUT="${1:?usage: search_vs_grid.sh OUT_DIR [REPEATS]}"; REPEATS="${2:-5}"
BIN="${BIN:-$ROOT/build/ddpbench}"; PY="${PY:-$ROOT/.venv/bin/python}"
W=(--device=cpu --model=resnet18 --width=16 --small-input --image-size=32 --steps=20 --warmup=3 --no-eval)
SPACE="${SPACE:-strategies=ddp,zero1,zero2,zero3,pmp;batch=16,32;bucket=5,25}"
BUDGET_SPACE="${BUDGET_SPACE:-strategies=ddp,zero1,zero2,zero3;batch=32;recompute=none,all}"
BUDGET_MB="${BUDGET_MB:-40}"
mkdir -p "$OUT"
timed() {  # NAME CMD...: runs CMD, its output to OUT/NAME.log, its wall seconds to OUT/times.csv
  local name="$1"; shift
  local t0; t0=$(date +%s.%N)
  "$@" > "$OUT/$name.log" 2>&1 || echo "failed ($?): $name" >&2
  echo "$name,$(echo "$(date +%s.%N) - $t0" | bc)" >> "$OUT/times.csv"
}
echo "name,wall_s" > "$OUT/times.csv"
S=("$PY" "$ROOT/scripts/search.py" --gpus=2 --bin="$BIN")
timed grid "${S[@]}" --exhaustive --rounds=3 --space="$SPACE" --out="$OUT/grid.csv" -- "${W[@]}"
for i in $(seq "$REPEATS"); do
  timed "search-$i" "${S[@]}" --measure=3 --rounds=3 --space="$SPACE" --out="$OUT/search.csv" -- "${W[@]}"
done
timed budget "${S[@]}" --measure=3 --rounds=1 --space="$BUDGET_SPACE" --memory-mb="$BUDGET_MB" \
  --out="$OUT/budget.csv" -- "${W[@]}"
"$PY" - "$OUT" "$REPEATS" <<'PY'
import csv, glob, os, sys
out, repeats = sys.argv[1], int(sys.argv[2])
def summary(log):  # the search-summary.csv a search's log names
    line = next(l for l in open(log) if l.startswith("rows in "))
    prefix = line.split("tables ")[1].split(".search.csv")[0]
    return next(csv.DictReader(open(prefix + ".search-summary.csv"))), prefix
times = {r["name"]: float(r["wall_s"]) for r in csv.DictReader(open(os.path.join(out, "times.csv")))}
grid, prefix = summary(os.path.join(out, "grid.log"))
medians = {r["entry"]: float(r["measured_img_s"]) for r in csv.DictReader(open(prefix + ".search.csv"))
           if r["measured_img_s"]}
best = max(medians, key=medians.get)
print(f"grid: {len(medians)} configurations measured, best {best} {medians[best]:.1f} img/s, "
      f"Kendall tau {grid['kendall_tau']} over the grid, model's first pick {grid['model_first']} "
      f"({medians.get(grid['model_first'], 0):.1f}), {times['grid']:.0f} s")
within = 0
for i in range(1, repeats + 1):
    s, _ = summary(os.path.join(out, f"search-{i}.log"))
    pick = s["measured_best"]
    ratio = medians.get(pick, 0) / medians[best]
    within += ratio >= 0.95
    print(f"search {i}: pick {pick} (grid median {medians.get(pick, 0):.1f}, {ratio:.3f} of the best), "
          f"tau {s['kendall_tau']} over its 3, {times[f'search-{i}']:.0f} s ({times[f'search-{i}'] / times['grid']:.2f} "
          f"of the grid)")
print(f"picks within 5% of the grid's best: {within} of {repeats}")
b, bprefix = summary(os.path.join(out, "budget.log"))
print(f"budget: winner {b['measured_best']} at {b['best_img_s']} img/s, {b['runs']} runs, {b['failed_runs']} failed; "
      f"ranked table {bprefix}.ranked.csv")
PY
