#!/usr/bin/env bash
# Nsight Systems profile of one ddpbench run with its NVTX ranges (domain
# "ddpbench": step, data, forward, backward, optimizer, communication).
#   scripts/profile_nsys.sh OUT_NAME [ddpbench flags...]
#   scripts/profile_nsys.sh pmp2 --strategy=pmp --gpus=2 --steps=20
# Writes OUT_NAME.nsys-rep and prints the NVTX range summary.
set -euo pipefail
[[ $# -ge 1 ]] || { echo "usage: $0 OUT_NAME [ddpbench flags...]" >&2; exit 2; }
NAME="$1"; shift
NSYS="$(command -v nsys || ls /usr/local/cuda/bin/nsys /opt/nvidia/nsight-systems/*/bin/nsys 2>/dev/null | head -1 || true)"
[[ -n "$NSYS" ]] || { echo "profile_nsys: nsys (Nsight Systems) not found on PATH or under /usr/local/cuda/bin" >&2; exit 2; }
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
"$NSYS" profile --trace=cuda,nvtx,osrt --force-overwrite=true -o "$NAME" \
  "$ROOT/build/ddpbench" --progress=off "$@"
"$NSYS" stats --report nvtx_sum "$NAME.nsys-rep" || true
