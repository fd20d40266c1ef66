#!/usr/bin/env bash
# The nightly job without Slurm, on a tiny matrix: two honest nights (every row
# carries the night's run_id and its entry; tables, figures, HTML; the gate
# passes the second against the first), a night with a failing entry and a
# multi-node entry outside Slurm (both recorded, the job goes on, exit 1), and
# a night made slower for real (the same entries with their core shared with
# five busy loops, about 6x less CPU) that the gate must fail, naming entry
# and figure. All nights run pinned to one core so that the slow one differs
# only by the busy loops. Also: the committed matrices parse (--dry-run).
set -euo pipefail
BIN="$1"; SRC="$2"
TMP="$(mktemp -d)"
HOGS=()
trap 'for p in "${HOGS[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$TMP"' EXIT
PY="$SRC/.venv/bin/python"
[[ -x "$PY" ]] && "$PY" -c "import matplotlib, tomllib" 2>/dev/null \
  || { echo "SKIP: .venv with Python >= 3.11 and matplotlib not found (run scripts/setup.sh)"; exit 77; }
command -v taskset >/dev/null || { echo "SKIP: taskset (util-linux) not installed"; exit 77; }
fail() { echo "FAIL: $*"; exit 1; }
NIGHTS="$TMP/nights"
nightly() { "$PY" "$SRC/scripts/nightly.py" --bin="$BIN" --out-dir="$NIGHTS" "$@"; }

cat >"$TMP/m.toml" <<'EOF'
[defaults]
device = "cpu"
model = "resnet18"
width = 4
small_input = true
dataset = "synthetic"
image_size = 16
num_classes = 10
batch_size = 8
steps = 12
warmup = 2
oversubscribe = true
[[run]]
name = "single-1x1"
strategy = "single"
[[run]]
name = "ddp-2x1"
strategy = "ddp"
gpus = 2
flags = ["--verify"]
EOF

# The gate's bounds are wide for a shared 2-core VM (honest nights differ by up
# to ~30% there): median - 2 x max(1.4826 MAD, 0.2 x median), from 2 earlier
# nights on (the change-point tests are tests/python/changepoints_test.py's).
GATE=(--k=2 --noise-floor=0.2 --min-history=2)
for night in n1 n2; do
  taskset -c 0 "$PY" "$SRC/scripts/nightly.py" --bin="$BIN" --out-dir="$NIGHTS" --matrix="$TMP/m.toml" \
    --run-id="$night" --k=2 --noise-floor=0.2 --gate=--min-history=2 >"$TMP/$night.out" 2>&1 || fail "honest night $night: $(cat "$TMP/$night.out")"
done
"$PY" - "$NIGHTS" <<'PYEOF' || fail "night files"
import csv, os, sys
d = sys.argv[1]
for night in ("n1", "n2"):
    rows = list(csv.DictReader(open(os.path.join(d, night + ".csv"))))
    assert [(r["run_id"], r["entry"], r["nodes"]) for r in rows] == [(night, "single-1x1", "1"), (night, "ddp-2x1", "1")], rows
    assert rows[1]["parity_ok"] == "true", rows[1]
    assert not os.path.exists(os.path.join(d, night + ".failures.csv"))
    for suffix in (".md", ".html", "_throughput.png", "_memory.png", "_scaling.png", "ddp-2x1.log"):
        path = os.path.join(d, night + ("/" if suffix.endswith(".log") else "") + suffix)
        assert os.path.getsize(path) > 0, path
html = open(os.path.join(d, "n2.html")).read()
assert html.count("data:image/png;base64,") == 4 and "ddp scaling" in html, "n2.html: 4 embedded figures, scaling table"
assert "<h2>Regression gate</h2>" in html and "0 regressions" in open(os.path.join(d, "n2.gate.txt")).read()
assert os.path.exists(os.path.join(d, "n2_history.png"))
PYEOF
grep -q "gate: 2 rows against 1 earlier night in .*: 0 regressions" "$TMP/n2.out" || fail "gate on n2: $(cat "$TMP/n2.out")"
grep -q "^not enough history single-1x1: 1 earlier night of this workload" "$TMP/n2.out" || fail "n2: $(cat "$TMP/n2.out")"

# A failing entry and a multi-node entry outside Slurm: recorded, the job goes on.
cat "$TMP/m.toml" >"$TMP/bad.toml"
cat >>"$TMP/bad.toml" <<'EOF'
[[run]]
name = "pmp-bad"
strategy = "pmp"
gpus = 2
chunks = 0
[[run]]
name = "ddp-1x2"
strategy = "ddp"
nodes = 2
[[run]]
name = "single-after"
strategy = "single"
EOF
if nightly --matrix="$TMP/bad.toml" --run-id=bad --no-report >"$TMP/bad.out" 2>&1; then fail "a night with failed entries exits 0"; fi
grep -q "!! pmp-bad failed (exit 2): .*--chunks=0" "$TMP/bad.out" || fail "pmp-bad not logged: $(cat "$TMP/bad.out")"
"$PY" - "$NIGHTS/bad.failures.csv" "$NIGHTS/bad.csv" <<'PYEOF' || fail "failures file"
import csv, sys
f = {r["entry"]: r for r in csv.DictReader(open(sys.argv[1]))}
assert set(f) == {"pmp-bad", "ddp-1x2"}, f
assert f["pmp-bad"]["exit_code"] == "2" and "--chunks=0" in f["pmp-bad"]["reason"], f["pmp-bad"]
assert "not inside a Slurm allocation" in f["ddp-1x2"]["reason"], f["ddp-1x2"]
assert [r["entry"] for r in csv.DictReader(open(sys.argv[2]))][-1] == "single-after"
PYEOF
"$PY" "$SRC/scripts/report.py" "$NIGHTS/bad.csv" | grep -q "^| pmp-bad | pmp | 2 x 1 | 2 |" || fail "report lacks the failed entry"
rm -r "$NIGHTS"/bad*   # not an honest night of this matrix

# The slow night (rows under the busy loops, the gate after them): the gate
# fails it, naming entry and figure.
for i in 1 2 3 4 5; do taskset -c 0 sh -c 'while :; do :; done' & HOGS+=($!); done
taskset -c 0 "$PY" "$SRC/scripts/nightly.py" --bin="$BIN" --out-dir="$NIGHTS" --matrix="$TMP/m.toml" \
  --run-id=slow --only=single-1x1 --no-report >"$TMP/slow.out" 2>&1 || fail "slow night: $(cat "$TMP/slow.out")"
for p in "${HOGS[@]}"; do kill "$p"; done; HOGS=()
if "$PY" "$SRC/scripts/report.py" "$NIGHTS/slow.csv" --against="$NIGHTS" "${GATE[@]}" >"$TMP/gate.out" 2>&1; then
  fail "the gate passed a night with a sixth of the CPU: $(cat "$TMP/gate.out")"
fi
grep -q "^REGRESSION single-1x1 throughput_img_s: tonight .*, outside this entry's noise: median .* of 2 nights" "$TMP/gate.out" \
  || fail "no throughput regression named: $(cat "$TMP/gate.out")"
grep -q "gate: 1 row against 2 earlier nights .*: 2 regressions$" "$TMP/gate.out" || fail "gate summary: $(cat "$TMP/gate.out")"

# An entry run as several processes: a row and a log per launch; a requeued
# night (same run id) runs only the launches it lacks.
L=(--bin="$BIN" --out-dir="$TMP/launch" --matrix="$TMP/m.toml" --only=single-1x1 --run-id=two --no-report)
"$PY" "$SRC/scripts/nightly.py" "${L[@]}" --launches=2 --reference-bin="$BIN" >"$TMP/l.out" 2>&1 \
  || fail "2 launches: $(cat "$TMP/l.out")"
grep -q "^== single-1x1: .* (2 launches)$" "$TMP/l.out" || fail "launches not said: $(cat "$TMP/l.out")"
[ "$(tail -n +2 "$TMP/launch/two.reference.csv" | wc -l)" = 2 ] || fail "a reference launch beside each launch"
"$PY" "$SRC/scripts/nightly.py" "${L[@]}" --launches=3 >"$TMP/l.out" 2>&1 || fail "3rd launch: $(cat "$TMP/l.out")"
[ "$(tail -n +2 "$TMP/launch/two.csv" | wc -l)" = 3 ] || fail "3 launches, 3 rows: $(cat "$TMP/launch/two.csv")"
ls "$TMP/launch/two/single-1x1.log" "$TMP/launch/two/single-1x1.2.log" "$TMP/launch/two/single-1x1.3.log" >/dev/null \
  || fail "a log per launch: $(ls "$TMP/launch/two")"
if "$PY" "$SRC/scripts/nightly.py" "${L[@]}" --launches=0 2>"$TMP/err"; then fail "--launches=0 accepted"; fi
grep -q "argument error: --launches=0: must be an integer >= 1\|--launches=0: must be an integer >= 1" "$TMP/err" \
  || fail "--launches=0 message: $(cat "$TMP/err")"
if "$PY" "$SRC/scripts/nightly.py" "${L[@]}" --reference-bin="$TMP/none" 2>"$TMP/err"; then fail "no reference build accepted"; fi
grep -q -- "--reference-bin=$TMP/none: not an executable file" "$TMP/err" || fail "--reference-bin message: $(cat "$TMP/err")"

# The committed matrices parse and give the commands they should.
nightly --matrix="$SRC/scripts/matrix/gpu.toml" --run-id=dry --dry-run >"$TMP/dry.out" || fail "gpu.toml: $(cat "$TMP/dry.out")"
grep -q "^== ddp-1x2: srun --nodes=2 --ntasks=2 --ntasks-per-node=1 .* --strategy=ddp .*--entry=ddp-1x2" "$TMP/dry.out" \
  || fail "gpu.toml ddp-1x2: $(cat "$TMP/dry.out")"
nightly --matrix="$SRC/scripts/matrix/cpu-small.toml" --run-id=dry --dry-run >/dev/null || fail "cpu-small.toml"
printf '[[run]]\nname = "a b"\nstrategy = "single"\n' >"$TMP/badname.toml"
if nightly --matrix="$TMP/badname.toml" --dry-run 2>"$TMP/err"; then fail "a bad entry name accepted"; fi
grep -q "run #1 (a b): name must be a label" "$TMP/err" || fail "bad name message: $(cat "$TMP/err")"

# The labels' bad inputs: one message, exit 2, no row.
source "$(dirname "${BASH_SOURCE[0]}")/lib/bad_input.sh"
COMMON=(--device=cpu --small-input --width=4 --image-size=16 --batch-size=4 --warmup=1 --progress=off)
cp "$NIGHTS/n1.csv" "$TMP/r.csv"; snapshot_results
bad_input single "--run-id=a b: not accepted; a label is at most 64 characters" --run-id="a b"
bad_input single "--entry=x/y: not accepted" --entry=x/y
bad_input single "--entry=$(printf 'e%.0s' {1..65}): not accepted" --entry="$(printf 'e%.0s' {1..65})"
echo "nightly: all checks passed"
