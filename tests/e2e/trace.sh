#!/usr/bin/env bash
# --trace end to end through the real binary (CPU, tiny model): a pipeline
# (1F1B and zero-bubble), dp, and 2-rank ddp and zero1 runs each write one Chrome
# trace that tests/e2e/lib/check_trace.py reads as a viewer would: valid JSON,
# one track per rank's main thread and per stage or dp device, events ordered and nested,
# the NVTX ranges' names, every micro-batch's F/B(/W), every bucket's
# collective on the comm tracks; the row names the file. A bad --trace path is
# refused before the first step (exit 2, one line, no row); plots/gantt.py
# draws the pipeline trace.
set -euo pipefail
BIN="$1"; SRC="$2"
TMP="$(mktemp -d)"; trap 'rm -rf "$TMP"' EXIT
PY="$SRC/.venv/bin/python"; [[ -x "$PY" ]] || PY=python3
fail() { echo "FAIL: $*"; exit 1; }
source "$(dirname "$0")/lib/bad_input.sh"
CHECK=(python3 "$(dirname "$0")/lib/check_trace.py")
COMMON=(--device=cpu --small-input --width=4 --image-size=16 --num-classes=10 --batch-size=8 --warmup=1
        --progress=off --oversubscribe)
# --steps=3 after one warm-up: 4 steps in the trace.
run() { "$BIN" "${COMMON[@]}" --steps=3 --out="$TMP/r.csv" "$@" 2>"$TMP/log" || { cat "$TMP/log"; fail "$*"; }; }

run --strategy=pmp --gpus=2 --chunks=4 --trace="$TMP/pmp.json"
"${CHECK[@]}" "$TMP/pmp.json" --ranks=1 --tracks="main,stage 0,stage 1" --steps=4 --chunks=4 --ops=F,backward
run --strategy=pmp --gpus=2 --chunks=4 --schedule=zero-bubble --trace="$TMP/zb.json"
"${CHECK[@]}" "$TMP/zb.json" --ranks=1 --tracks="main,stage 0,stage 1" --steps=4 --chunks=4 --ops=F,B,W
run --strategy=dp --gpus=2 --trace="$TMP/dp.json"
"${CHECK[@]}" "$TMP/dp.json" --ranks=1 --tracks="main,device 0 worker,device 1 worker" --steps=4
run --strategy=ddp --gpus=2 --trace="$TMP/ddp.json"
"${CHECK[@]}" "$TMP/ddp.json" --ranks=2 --tracks=main --steps=4 --collective=all-reduce
run --strategy=zero1 --gpus=2 --trace="$TMP/zero1.json"
# Shared memory (the default) reduce-scatters natively; Gloo, which has no reduce-scatter, through alltoall.
"${CHECK[@]}" "$TMP/zero1.json" --ranks=2 --tracks=main --steps=4 --collective=reduce-scatter --also=all-gather
run --strategy=zero1 --gpus=2 --cpu-backend=gloo --trace="$TMP/zero1-gloo.json"
"${CHECK[@]}" "$TMP/zero1-gloo.json" --ranks=2 --tracks=main --steps=4 --collective=alltoall --also=all-gather
run --strategy=single  # no --trace: no trace column

"$PY" - "$TMP" <<'PYEOF'
import csv, os, sys
tmp = sys.argv[1]
rows = list(csv.DictReader(open(os.path.join(tmp, "r.csv"))))
want = [os.path.join(tmp, f) for f in ("pmp.json", "zb.json", "dp.json", "ddp.json", "zero1.json", "zero1-gloo.json")] + [""]
assert [r["trace"] for r in rows] == want, [r["trace"] for r in rows]
PYEOF

# Refused before anything runs, for a single process and a spawning parent.
snapshot_results
for s in pmp ddp; do
  G=(--gpus=2); [[ $s == pmp ]] && G+=(--chunks=4)
  bad_input $s "--trace=/nonexistent/dir/t.json: directory /nonexistent/dir does not exist" "${G[@]}" \
    --trace=/nonexistent/dir/t.json
  bad_input $s "--trace=$TMP: is a directory" "${G[@]}" --trace="$TMP"
done
bad_input single "--trace=$TMP/r.csv: is also the --out results file" --trace="$TMP/r.csv"
[[ ! -e /nonexistent/dir/t.json ]] || fail "a trace was written to a bad path"

# The Gantt chart of the pipeline trace (needs matplotlib: the project's venv).
if "$PY" -c 'import matplotlib' 2>/dev/null; then
  "$PY" "$SRC/plots/gantt.py" "$TMP/zb.json" --out "$TMP/zb.png" --steps=1 >/dev/null
  [[ "$(head -c 4 "$TMP/zb.png" | od -An -c | tr -d ' ')" == '211PNG' ]] || fail "gantt.py wrote no PNG"
fi
echo "trace: all checks passed"
