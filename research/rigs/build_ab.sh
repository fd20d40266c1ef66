#!/usr/bin/env bash
# Two builds of ddpbench on the same workload, interleaved: each round runs
# every strategy with both binaries, their order swapped every other round,
# so that a slow minute on a shared machine hits both alike. Prints each
# strategy's median throughput per build, new/old per round, the sharded
# strategies against ddp and ddp's scaling efficiency (2 ranks against
# single) per build.
#   research/rigs/build_ab.sh OLD_BIN NEW_BIN OUT.csv ROUNDS
# COMMON: the flags every run shares (default: CPU, 1 thread per device,
# ResNet-18 at 64 px, batch 16 per device, 20 timed steps after 5).
set -euo pipefail
[[ $# -eq 4 ]] || { echo "usage: $0 OLD_BIN NEW_BIN OUT.csv ROUNDS" >&2; exit 2; }
OLD="$1"; NEW="$2"; OUT="$3"; ROUNDS="$4"
[[ $ROUNDS =~ ^[1-9][0-9]*$ ]] || { echo "$0: ROUNDS=$ROUNDS: want a whole number >= 1" >&2; exit 2; }
COMMON="${COMMON:---device=cpu --threads-per-device=1 --model=resnet18 --image-size=64 --batch-size=16 --steps=20 --warmup=5 --no-eval --progress=off}"
STRATEGIES="${STRATEGIES:-single ddp zero1 zero2 zero3}"
one() {  # build-name binary strategy round
  local g=(--gpus=2); [[ $3 == single ]] && g=()
  # shellcheck disable=SC2086
  "$2" $COMMON --strategy="$3" "${g[@]}" --run-id="ab-r$4" --entry="$1-$3" --out="$OUT" >/dev/null 2>&1 ||
    echo "round $4: $1 $3 failed" >&2
}
for r in $(seq "$ROUNDS"); do
  for s in $STRATEGIES; do
    if (( r % 2 )); then one old "$OLD" "$s" "$r"; one new "$NEW" "$s" "$r"
    else one new "$NEW" "$s" "$r"; one old "$OLD" "$s" "$r"; fi
  done
done
python3 - "$OUT" <<'PY'
import collections, csv, statistics, sys
by = collections.defaultdict(dict)
sha = {}
for r in csv.DictReader(open(sys.argv[1])):
    build, strategy = r["entry"].split("-", 1)
    by[(build, strategy)][r["run_id"]] = float(r["throughput_img_s"])
    sha[build] = r["git_sha"]
med = lambda v: statistics.median(v.values())
print(f"old = {sha.get('old')}, new = {sha.get('new')}")
for s in sorted({k[1] for k in by}):
    o, n = by[("old", s)], by[("new", s)]
    per = [n[k] / o[k] for k in n if k in o]
    print(f"{s:7s} old {med(o):7.1f}  new {med(n):7.1f} img/s  new/old median {statistics.median(per):.3f} (rounds: {', '.join(f'{x:.3f}' for x in per)})")
for b in ("old", "new"):
    d = by.get((b, "ddp"))
    if not d: continue
    parts = [f"{s}/ddp {statistics.median([by[(b, s)][k] / d[k] for k in d if k in by[(b, s)]]):.3f}"
             for s in ("zero1", "zero2", "zero3") if (b, s) in by]
    if (b, "single") in by:
        parts.append(f"ddp scaling {statistics.median([d[k] / (2 * by[(b, 'single')][k]) for k in d if k in by[(b, 'single')]]):.3f}")
    print(f"{b}: " + ", ".join(parts))
PY
