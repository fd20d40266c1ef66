#!/usr/bin/env bash
# One device call's worth of GPU measurements for the fused BatchNorm, CUDA
# graphs for ddp and the profile breakdown, in order of what matters most,
# each part's files packed into $OUT/results.tgz as soon as it ends (a call
# cut off at its limit still brings back what was done). Run on the GPU
# machine from the repository root:  research/rigs/gpu_session_fuse_graphs.sh
set -uo pipefail
export PYTHONUNBUFFERED=1
OUT="${OUT:-/tmp/out}"; R=/tmp/r; mkdir -p "$OUT" "$R"
pack() { tar czf "$OUT/results.tgz" -C "$R" --exclude='*.json' . 2>/dev/null; echo "== packed after $1 ($(date -u +%T))"; }
start=$(date +%s)
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
scripts/gpu_build.sh build > "$R/build.log" 2>&1 || { tail -40 "$R/build.log"; pack build; exit 1; }
echo "== built in $(( $(date +%s) - start )) s"
# One part of scripts/gpu_bench.sh, stopped (with every process it started)
# after $1 seconds.
G() {
  local limit="$1"; shift
  set -m; scripts/gpu_bench.sh "$R" "$@" & local pid=$!; set +m
  ( sleep "$limit"; kill -TERM -- "-$pid" 2>/dev/null ) & local watch=$!
  wait "$pid"; kill "$watch" 2>/dev/null
}
ROUNDS=1 G 150 ddp-graphs; pack ddp-graphs
G 60 graphs-parity; pack graphs-parity
ROUNDS=1 STEPS=30 WARMUP=10 FUSE_NO_GRAPHS_ROW=1 COMPILE_ROUNDS=1 G 300 fuse; pack fuse-1
G 90 fuse-parity; pack fuse-parity
G 100 profile; pack profile
ROUNDS=1 STEPS=30 WARMUP=10 FUSE_NO_GRAPHS_ROW=1 COMPILE_ROUNDS=0 G 120 fuse; pack fuse-2
ROUNDS=1 G 100 ddp-graphs; pack ddp-graphs-2
echo "== done in $(( $(date +%s) - start )) s"
