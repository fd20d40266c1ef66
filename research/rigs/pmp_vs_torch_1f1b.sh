#!/usr/bin/env bash
# pmp with its own shape at 8 micro-batches (schedule, split and units chosen
# by ddpbench, shape trials included; and with --stage-ranks, a process per
# stage as PyTorch runs them, shape by prediction, over Gloo and over the
# shared-memory backend) against PyTorch's
# torch.distributed.pipelining Schedule1F1B (research/rigs/pipelining_torch.py)
# with the best of three hand-picked cuts (5,5 6,4 7,3 blocks), ResNet-18 at
# 64 px, batch 32, 2 CPU devices / ranks of 1 thread (pmp also with
# --overlap-optimizer), interleaved rounds (the
# order reversed every other round). Prints each entry's median img/s and
# pmp / (the best torch cut's median).
#   research/rigs/pmp_vs_torch_1f1b.sh OUT.csv [ROUNDS=3]   (BIN: build/ddpbench, PY: .venv/bin/python)
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
OUT="${1:?usage: pmp_vs_torch_1f1b.sh OUT.csv [ROUNDS]}"; ROUNDS="${2:-3}"
[[ $ROUNDS =~ ^[1-9][0-9]*$ ]] || { echo "$0: ROUNDS=$ROUNDS: want a whole number >= 1" >&2; exit 2; }
BIN="${BIN:-$ROOT/build/ddpbench}"; PY="${PY:-$ROOT/.venv/bin/python}"
SHA="$(git -C "$ROOT" describe --always --dirty)"
[[ -f $OUT ]] || echo "timestamp,host,git_sha,round,entry,img_s,command" > "$OUT"
TMP="$(mktemp -d)"; trap 'rm -rf "$TMP"' EXIT
entries=(pmp pmp-overlap pmp-stage-ranks pmp-stage-ranks-shm torch-1f1b-5:5 torch-1f1b-6:4 torch-1f1b-7:3)  # the cut, ':' for ',' (CSV)
run() {  # round entry
  local r="$1" e="$2" img cmd
  if [[ $e == pmp* ]]; then
    local ranks=""; [[ $e != pmp-stage-ranks ]] || ranks="--stage-ranks "
    [[ $e != pmp-stage-ranks-shm ]] || ranks="--stage-ranks --cpu-backend=shm "
    [[ $e != pmp-overlap ]] || ranks="--overlap-optimizer "
    cmd="$BIN --strategy=pmp --gpus=2 $ranks--chunks=8 --device=cpu --threads-per-device=1 --model=resnet18 --image-size=64 --batch-size=32 --steps=10 --warmup=3 --no-eval --progress=off"
    $cmd --out="$TMP/r.csv" > /dev/null 2>&1 || { echo "failed: $cmd" >&2; return 0; }
    img="$("$PY" -c 'import csv,sys; print(list(csv.DictReader(open(sys.argv[1])))[-1]["throughput_img_s"])' "$TMP/r.csv")"
  else
    cmd="$PY $ROOT/research/rigs/pipelining_torch.py --schedule=1f1b --split=$(tr : , <<< "${e##*-}") --ranks=2 --batch-size=32 --chunks=8 --image-size=64 --steps=10 --warmup=3"
    img="$($cmd 2>/dev/null | sed -n 's/^\([0-9.]*\) img\/s$/\1/p' | tail -1)" || true
    [[ -n $img ]] || { echo "failed: $cmd" >&2; return 0; }
  fi
  echo "$(date -u +%FT%TZ),$(hostname),$SHA,$r,$e,$img,\"$cmd\"" >> "$OUT"
  echo "round $r: $e $img img/s"
}
for r in $(seq "$ROUNDS"); do
  order=("${entries[@]}")
  if (( r % 2 == 0 )); then order=(); for ((i=${#entries[@]}-1; i>=0; i--)); do order+=("${entries[i]}"); done; fi
  for e in "${order[@]}"; do run "$r" "$e"; done
done
"$PY" - "$OUT" "$SHA" <<'PY'
import collections, csv, statistics, sys
by = collections.defaultdict(list)
for row in csv.DictReader(open(sys.argv[1])):
    if row["git_sha"] == sys.argv[2]:
        by[row["entry"]].append(float(row["img_s"]))
med = {e: statistics.median(v) for e, v in by.items()}
for e, v in sorted(by.items()):
    print(f"{e:19s} median {med[e]:7.1f} img/s ({', '.join(f'{x:.1f}' for x in v)})")
torch = {e: m for e, m in med.items() if e.startswith("torch")}
if "pmp" in med and torch:
    best = max(torch, key=torch.get)
    for e in ("pmp", "pmp-overlap", "pmp-stage-ranks", "pmp-stage-ranks-shm"):
        if e in med:
            print(f"{e} / best torch 1F1B cut ({best}) = {med[e] / torch[best]:.3f}")
PY
