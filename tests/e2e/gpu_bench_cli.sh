#!/usr/bin/env bash
# scripts/gpu_bench.sh's refusals, checked where they can be (any machine): a
# bad part or round count, a missing binary, and (here, without a GPU) no CUDA
# device: each one line naming the problem, exit 2, and nothing written.
set -euo pipefail
BIN="$1"; SRC="$2"
TMP="$(mktemp -d)"; trap 'rm -rf "$TMP"' EXIT
PY="$SRC/.venv/bin/python"; [[ -x "$PY" ]] || PY=python3
fail() { echo "FAIL: $*"; exit 1; }
refused() {  # expected-text, then env assignments and arguments
  local expect="$1" out rc; shift
  set +e; out="$(env PY="$PY" BIN="$BIN" "$@" 2>&1)"; rc=$?; set -e
  [[ $rc -eq 2 ]] || fail "$* exited $rc (want 2): $out"
  [[ $(wc -l <<<"$out") -eq 1 ]] && grep -q "$expect" <<<"$out" || fail "$*: want one line with '$expect': $out"
}
G="$SRC/scripts/gpu_bench.sh"
refused "part 'bogus': want parity, compare, compare-ddp, matrix, expected, fuse, fuse-parity, graphs-parity, ddp-graphs, profile, memory, conv-bn or decode" bash "$G" "$TMP/out" parity bogus
refused "ROUNDS=0: want a whole number >= 1" ROUNDS=0 bash "$G" "$TMP/out" compare
refused "$TMP/none is missing; run scripts/gpu_build.sh build first" BIN="$TMP/none" bash "$G" "$TMP/out"
if [[ "$("$PY" -c 'import torch; print(torch.cuda.device_count())' 2>/dev/null || echo 0)" != 0 ]]; then
  echo "a GPU is visible: the no-device refusal is not checked here"; exit 77
fi
refused "no CUDA device visible" bash "$G" "$TMP/out" parity
[[ ! -e "$TMP/out" ]] || fail "a refused run created its output folder"
echo "gpu_bench_cli: all checks passed"
