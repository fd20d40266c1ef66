#!/usr/bin/env bash
# Straggler attribution measured: NONE runs of ddp on 2 CPU ranks with no
# fault (how often the row names a straggler that is not there), REPEATS runs
# of each injected delay (ddp, zero3, pmp --stage-ranks; 50 ms in rank 1's
# backward, 50 ms in rank 0's data), and the flight recorder's own cost:
# PAIRS interleaved pairs of the same ddp run with --flight-recorder=0 and
# with the default. Every row to OUT_DIR/rows.csv; a summary on stdout.
#   research/rigs/straggler_attribution.sh OUT_DIR [NONE=10] [REPEATS=3] [PAIRS=5]   (BIN: build/ddpbench)
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
OUT="${1:?usage: straggler_attribution.sh OUT_DIR [NONE] [REPEATS] [PAIRS]}"
NONE="${2:-10}"; REPEATS="${3:-3}"; PAIRS="${4:-5}"
BIN="${BIN:-$ROOT/build/ddpbench}"; PY="${PY:-$ROOT/.venv/bin/python}"
W=(--gpus=2 --device=cpu --model=resnet18 --width=16 --small-input --image-size=32 --batch-size=32 --steps=20
   --warmup=3 --no-eval --expected=off --progress=off)
mkdir -p "$OUT"
ROWS="$OUT/rows.csv"
run() {  # ENTRY FLAGS...: one row labelled ENTRY
  local entry="$1"; shift
  "$BIN" "${W[@]}" --entry="$entry" --out="$ROWS" "$@" >> "$OUT/runs.log" 2>&1 || echo "failed ($?): $entry $*" >&2
}
for i in $(seq "$NONE"); do run none --strategy=ddp; done
for i in $(seq "$REPEATS"); do
  for s in ddp zero3 pmp; do
    extra=(); [[ $s == pmp ]] && extra=(--stage-ranks)
    run "$s-backward" --strategy=$s "${extra[@]}" --inject=delay:rank=1,phase=backward,ms=50
    run "$s-data" --strategy=$s "${extra[@]}" --inject=slow-data:rank=0,ms=50
  done
done
for i in $(seq "$PAIRS"); do
  run recorder-off --strategy=ddp --flight-recorder=0
  run recorder-on --strategy=ddp
done
"$PY" - "$ROWS" <<'PY'
import csv, statistics, sys
rows = list(csv.DictReader(open(sys.argv[1])))
by = {}
for r in rows:
    by.setdefault(r["entry"], []).append(r)
none = by.get("none", [])
named = [r for r in none if r["straggler_rank"] not in ("none", "")]
print(f"no fault: {len(none) - len(named)} of {len(none)} rows say straggler_rank=none; lateness "
      + ", ".join(f"{float(r['straggler_ms']):.2f}/{float(r['straggler_noise_ms']):.2f}" for r in none)
      + " ms (latest rank's mean / noise line)")
want = {"backward": ("1", "backward"), "data": ("0", "data")}
for entry, rs in sorted(by.items()):
    if entry in ("none",) or entry.startswith("recorder"):
        continue
    rank, phase = want[entry.split("-")[1]]
    right = [r for r in rs if r["straggler_rank"] == rank and r["straggler_phase"] == phase
             and abs(float(r["straggler_ms"]) - 50) <= 10]
    print(f"{entry:14} {len(right)} of {len(rs)} named rank {rank}, {phase}, within 20% of 50 ms: "
          + ", ".join(f"{r['straggler_rank']}/{r['straggler_phase']}/{float(r['straggler_ms']):.1f}" for r in rs))
off = [float(r["throughput_img_s"]) for r in by.get("recorder-off", [])]
on = [float(r["throughput_img_s"]) for r in by.get("recorder-on", [])]
if off and on:
    ratios = [b / a for a, b in zip(off, on)]
    print(f"flight recorder on / off, img/s, {len(ratios)} interleaved pairs: median {statistics.median(ratios):.3f} "
          f"(each {', '.join(f'{x:.3f}' for x in ratios)}); off {statistics.median(off):.1f}, on {statistics.median(on):.1f}")
PY
