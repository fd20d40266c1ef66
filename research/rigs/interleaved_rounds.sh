#!/usr/bin/env bash
# Speed comparisons on a shared machine: run several ddpbench configurations
# in interleaved rounds (A B C, A B C, ...) so that a slow minute hurts all of
# them alike, append every row to one CSV, then print each configuration's
# median throughput and measured bubble with the per-round values, and the
# median of the bubble its stage times leave on ideal devices (bubble_simulated).
#
#   research/rigs/interleaved_rounds.sh OUT.csv ROUNDS 'name:flags' ['name:flags' ...]
#
# Each row's entry is name-rN and its run id RUN_ID (default: interleaved-
# <UTC date>). COMMON holds the flags every run shares (default: the pipeline benchmarks'
# workload: CPU, 1 thread per device, ResNet-18 at 64 px, batch 32, 10 timed
# steps); BIN the binary (default build/ddpbench).
set -euo pipefail
[[ $# -ge 3 ]] || { echo "usage: $0 OUT.csv ROUNDS 'name:flags' ..." >&2; exit 2; }
OUT="$1"; ROUNDS="$2"; shift 2
[[ $ROUNDS =~ ^[1-9][0-9]*$ ]] || { echo "$0: ROUNDS=$ROUNDS: want a whole number >= 1" >&2; exit 2; }
BIN="${BIN:-build/ddpbench}"
COMMON="${COMMON:---device=cpu --threads-per-device=1 --image-size=64 --batch-size=32 --steps=10 --progress=off}"
RUN_ID="${RUN_ID:-interleaved-$(date -u +%Y%m%d)}"
for spec in "$@"; do
  [[ $spec == *:* && -n ${spec%%:*} ]] || { echo "$0: '$spec': want name:flags" >&2; exit 2; }
done
for r in $(seq "$ROUNDS"); do
  for spec in "$@"; do
    name="${spec%%:*}"
    # shellcheck disable=SC2086  # the flags are words
    "$BIN" $COMMON ${spec#*:} --run-id="$RUN_ID" --entry="$name-r$r" --out="$OUT" >/dev/null 2>&1 ||
      echo "round $r: $name failed (exit $?)" >&2
  done
done
python3 - "$OUT" "$RUN_ID" <<'PY'
import collections, csv, statistics, sys
rows = [r for r in csv.DictReader(open(sys.argv[1])) if r["run_id"] == sys.argv[2]]
by = collections.defaultdict(list)
for r in rows:
    by[r["entry"].rsplit("-r", 1)[0]].append(r)
for name, rs in by.items():
    tp = [float(r["throughput_img_s"]) for r in rs]
    bubble = [float(r["bubble_measured"]) for r in rs if r.get("bubble_measured")]
    simulated = [float(r["bubble_simulated"]) for r in rs if r.get("bubble_simulated")]
    last = rs[-1]
    shape = f"{last.get('schedule') or last['strategy']} M={last.get('chunks', '')} V={last.get('virtual_stages', '')} split {last.get('split', '')}"
    print(f"{name:12s} median {statistics.median(tp):7.2f} img/s {tp}  "
          f"bubble {statistics.median(bubble) if bubble else float('nan'):.4f} {bubble}  "
          f"simulated {statistics.median(simulated) if simulated else float('nan'):.4f}  {shape}")
PY
