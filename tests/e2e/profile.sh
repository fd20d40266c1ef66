#!/usr/bin/env bash
# --profile end to end through the real binary (CPU, tiny model): single and
# a 2-rank ddp write PyTorch profiler traces of their timed steps (rank 0's),
# the row names the file, scripts/profile_breakdown.py reads each as a user
# would (one ddpbench_step range per timed step, every convolution and batch
# norm counted once); pmp, whose stages run on threads of their own, warns
# that their operators are not in a CPU profile; bad --profile paths and a clash with --out or --trace are refused
# before the first step (exit 2, one line, no row), and the breakdown refuses
# a file that is no profile.
set -euo pipefail
BIN="$1"; SRC="$2"
TMP="$(mktemp -d)"; trap 'rm -rf "$TMP"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
source "$(dirname "$0")/lib/bad_input.sh"
COMMON=(--device=cpu --small-input --width=4 --image-size=16 --num-classes=10 --batch-size=8 --warmup=1
        --progress=off --oversubscribe --no-eval)
run() { "$BIN" "${COMMON[@]}" --steps=3 --out="$TMP/r.csv" "$@" 2>"$TMP/log" || { cat "$TMP/log"; fail "$*"; }; }
BREAKDOWN=(python3 "$SRC/scripts/profile_breakdown.py")

run --strategy=single --profile="$TMP/single.json"
run --strategy=ddp --gpus=2 --profile="$TMP/ddp.json"
run --strategy=single  # no --profile: no profile column
python3 - "$TMP" <<'PYEOF'
import csv, os, sys
tmp = sys.argv[1]
rows = list(csv.DictReader(open(os.path.join(tmp, "r.csv"))))
want = [os.path.join(tmp, "single.json"), os.path.join(tmp, "ddp.json"), ""]
assert [r["profile"] for r in rows] == want, [r["profile"] for r in rows]
PYEOF
for f in single ddp; do
  out="$("${BREAKDOWN[@]}" --format=csv --label=$f "$TMP/$f.json")"
  python3 - "$out" "$f" <<'PYEOF'
import csv, io, sys
rows = {r["kind"]: r for r in csv.DictReader(io.StringIO(sys.argv[1]))}
label = sys.argv[2]
assert all(r["label"] == label for r in rows.values()), rows
# ResNet-18's 20 convolutions and 20 batch norms, forward and backward, once
# each per step (counts, not times: the machine's load moves the times).
counts = {k: float(r["per_step_count"]) for k, r in rows.items() if r["per_step_count"]}
assert counts.get("convolution") == 40 and counts.get("batchnorm") == 40, counts
step = float(rows["step"]["ms_per_step"])
assert 0 < float(rows["busy (union)"]["ms_per_step"]) <= step + 1e-9, rows
PYEOF
  # The whole table first: grep -q would stop reading at the match, and the
  # script's broken pipe would fail the pipeline (pipefail).
  table="$("${BREAKDOWN[@]}" "$TMP/$f.json")" || fail "$f: profile_breakdown.py failed"
  grep -q "^host operators, 3 steps profiled$" <<< "$table" || fail "$f: want 3 profiled steps: $table"
done

# Device threads (pmp's stages) are not profiled on CPU: the run says so.
"$BIN" "${COMMON[@]}" --steps=2 --strategy=pmp --gpus=2 --profile="$TMP/pmp.json" --out="$TMP/pmp.csv" 2>"$TMP/log" ||
  { cat "$TMP/log"; fail "pmp --profile"; }
grep -q "profile on CPU records the training loop's thread only: --strategy=pmp" "$TMP/log" ||
  fail "pmp --profile: no warning about its device threads: $(cat "$TMP/log")"

snapshot_results
bad_input single "--profile=/nonexistent/dir/p.json: directory /nonexistent/dir does not exist" \
  --profile=/nonexistent/dir/p.json
bad_input ddp "--profile=$TMP: is a directory" --gpus=2 --profile="$TMP"
bad_input single "--profile=$TMP/r.csv: is also the --out results file" --profile="$TMP/r.csv"
bad_input single "--profile=$TMP/t.json: is also the --trace file" --trace="$TMP/t.json" --profile="$TMP/t.json"
set +e; out="$("${BREAKDOWN[@]}" "$TMP/r.csv" 2>&1)"; rc=$?; set -e
[[ $rc -eq 2 && $(wc -l <<<"$out") -eq 1 ]] && grep -q "not a readable profile trace" <<<"$out" ||
  fail "breakdown of a CSV: exit $rc: $out"
echo '{"traceEvents": []}' > "$TMP/empty.json"
set +e; out="$("${BREAKDOWN[@]}" "$TMP/empty.json" 2>&1)"; rc=$?; set -e
[[ $rc -eq 2 ]] && grep -q "holds no operators or kernels" <<<"$out" || fail "breakdown of an empty trace: exit $rc: $out"
echo "profile: all checks passed"
