#!/usr/bin/env bash
# Out of memory, through the real binary on CPU:
#  - a run whose model state and activations surely exceed a device is
#    refused before anything is allocated: exit 2, one error line naming the
#    flags, the demand and the capacity (a --width or --batch-size far too
#    large for the machine; a small --cpu-device-memory-mb for ddp and zero3);
#  - a run that passes that lower bound but outgrows its device while running
#    fails with one line naming the device (and the rank), the bytes asked and
#    held, and what to try: exit 6, the other rank stopped;
#  - no run here leaves a row.
set -euo pipefail
BIN="$1"; SRC="$2"
TMP="$(mktemp -d)"; trap 'rm -rf "$TMP"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
COMMON=(--device=cpu --small-input --image-size=28 --steps=2 --warmup=1 --progress=off --out="$TMP/r.csv")

expect() {  # CODE 'text' FLAGS...
  local code="$1" text="$2"; shift 2
  local out rc
  set +e; out="$(timeout 120 "$BIN" "$@" "${COMMON[@]}" 2>&1 </dev/null)"; rc=$?; set -e
  [[ $rc -eq $code ]] || fail "$* exited $rc (want $code): $out"
  grep -q -- "ddpbench: error: .*$text" <<<"$out" || fail "$*: message lacks '$text': $out"
  grep -q "try a smaller --batch-size or --width" <<<"$out" || fail "$*: no advice: $out"
  [[ ! -e "$TMP/r.csv" ]] || fail "$*: a row was written"
  echo "ok ($rc): $*"
}
one_line() {  # the error lines of a single-process run
  local n; n="$(timeout 120 "$BIN" "$@" "${COMMON[@]}" 2>&1 </dev/null | grep -c "ddpbench: error:" || true)"
  [[ $n -eq 1 ]] || fail "$*: $n error lines (want 1)"
}

# Preflight refusals (exit 2).
expect 2 "--width=100000 .*a device needs at least .* GiB of parameters, gradients and optimizer state" \
  --strategy=single --width=100000 --batch-size=8
one_line --strategy=single --width=100000 --batch-size=8
expect 2 "--batch-size=100000000: a device needs at least .* of activations), more than" \
  --strategy=single --width=4 --batch-size=100000000
expect 2 "more than the 5.0 MiB of a cpu device (--cpu-device-memory-mb)" \
  --strategy=ddp --gpus=2 --width=16 --batch-size=64 --cpu-device-memory-mb=5
expect 2 "more than the 1.0 MiB of a cpu device" --strategy=zero3 --gpus=2 --width=16 --batch-size=16 \
  --cpu-device-memory-mb=1

# Out of memory while running (exit 6): the lower bound passes, the run does not fit.
expect 6 "out of memory on cpu device 0: asked for .*, the run held .* there of its 50.0 MiB" \
  --strategy=single --width=16 --batch-size=64 --cpu-device-memory-mb=50
one_line --strategy=single --width=16 --batch-size=64 --cpu-device-memory-mb=50
expect 6 "rank [01]: out of memory on cpu device 0: asked for" \
  --strategy=ddp --gpus=2 --width=16 --batch-size=32 --cpu-device-memory-mb=25

# The flag itself.
expect_bad() {
  local out rc
  set +e; out="$(timeout 60 "$BIN" --strategy=single "${COMMON[@]}" "$@" 2>&1 </dev/null)"; rc=$?; set -e
  [[ $rc -eq 2 ]] && grep -q "ddpbench: error: .*--cpu-device-memory-mb" <<<"$out" || fail "$*: $rc $out"
}
expect_bad --cpu-device-memory-mb=-3
expect_bad --cpu-device-memory-mb=lots
echo "out_of_memory: all passed"
