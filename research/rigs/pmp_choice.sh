#!/usr/bin/env bash
# pmp's own shape against the shapes it weighed, measured: on the README's
# compare workload and on the pipeline benchmark workload, interleaved
# rounds of pmp with no shape flags (its choice), mp, and fixed shapes pmp
# considers (1 micro-batch; 2 micro-batches with 1f1b, zero-bubble, zbv).
#   research/rigs/pmp_choice.sh OUT.csv [ROUNDS=2]   (BIN: build/ddpbench)
set -euo pipefail
OUT="${1:?usage: pmp_choice.sh OUT.csv [ROUNDS]}"; ROUNDS="${2:-2}"
BIN="${BIN:-build/ddpbench}"
README=(--device=cpu --small-input --width=16 --image-size=32 --batch-size=16 --steps=30 --warmup=5)
BENCH=(--device=cpu --model=resnet18 --image-size=64 --batch-size=32 --steps=10 --warmup=3)
one() {  # run-id entry flags...
  local id="$1" entry="$2"; shift 2
  "$BIN" --gpus=2 --no-eval --progress=off --run-id="$id" --entry="$entry" --out="$OUT" "$@" > /dev/null 2>&1 ||
    echo "failed: $entry $*" >&2
}
for r in $(seq 1 "$ROUNDS"); do
  for w in readme bench; do
    if [[ $w == readme ]]; then W=("${README[@]}"); else W=("${BENCH[@]}"); fi
    one "$w-r$r" mp --strategy=mp "${W[@]}"
    one "$w-r$r" pmp-choice --strategy=pmp "${W[@]}"
    one "$w-r$r" pmp-m1-1f1b --strategy=pmp --chunks=1 --schedule=1f1b --units=blocks "${W[@]}"
    one "$w-r$r" pmp-m2-1f1b --strategy=pmp --chunks=2 --schedule=1f1b --units=blocks "${W[@]}"
    one "$w-r$r" pmp-m2-zero-bubble --strategy=pmp --chunks=2 --schedule=zero-bubble "${W[@]}"
    one "$w-r$r" pmp-m2-zbv --strategy=pmp --chunks=2 --schedule=zbv "${W[@]}"
  done
done
python3 - "$OUT" <<'PY'
import collections, csv, statistics, sys
by = collections.defaultdict(list)
shape = {}
for r in csv.DictReader(open(sys.argv[1])):
    w = r["run_id"].split("-r")[0]
    by[(w, r["entry"])].append(float(r["throughput_img_s"]))
    if r["entry"] == "pmp-choice":
        shape.setdefault(w, set()).add(f'{r["chunks"]} x {r["schedule"]} V={r["virtual_stages"]} {r["units"]} {r["split"]}')
for w in ("readme", "bench"):
    mp = statistics.median(by[(w, "mp")])
    for (ww, e), v in sorted(by.items()):
        if ww == w:
            print(f"{w:7s} {e:20s} median {statistics.median(v):7.1f} img/s  / mp {statistics.median(v) / mp:.3f}  ({', '.join(f'{x:.1f}' for x in v)})")
    print(f"{w:7s} pmp chose: {'; '.join(sorted(shape.get(w, [])))}")
PY
