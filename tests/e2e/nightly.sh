#!/usr/bin/env bash
# The nightly job without Slurm, on a tiny matrix: two honest nights (every row
# carries the night's run_id and its entry; tables, figures, HTML; the gate
# runs after each), a night with a failing entry and a multi-node entry outside
# Slurm (both recorded, the job goes on, exit 1), an entry run as several
# launches, the committed matrices (--dry-run) and the labels' bad inputs.
# The gate is checked on a history built from the honest nights' real rows,
# with no timing threshold in it: n1, 14 earlier nights planted from n2's
# rows (throughput and step time off by a fixed wobble within 1.5%), n2 as it
# ran, then three nights from n2's rows with single-1x1 15% slower and a new
# revision. n2 must pass against that history, with enough nights that every
# rule judges it; the loss must be named with entry, figure, nights and
# revisions. How fast this machine ran n1 and n2 decides neither (see below).
set -euo pipefail
BIN="$1"; SRC="$2"
TMP="$(mktemp -d)"
trap 'rm -rf "$TMP"' EXIT
PY="$SRC/.venv/bin/python"
[[ -x "$PY" ]] && "$PY" -c "import matplotlib, tomllib" 2>/dev/null \
  || { echo "SKIP: .venv with Python >= 3.11 and matplotlib not found (run scripts/setup.sh)"; exit 77; }
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

# Two honest nights as the job runs them, the gate after each (n2 against n1
# alone is 'not enough history'; the gate on a longer history comes next).
for night in n1 n2; do
  nightly --matrix="$TMP/m.toml" --run-id="$night" >"$TMP/$night.out" 2>&1 || fail "honest night $night: $(cat "$TMP/$night.out")"
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

# The history, copied and edited with Python's csv module: n1's rows; e01..e14,
# each n2's rows with throughput x (1 + w) and step time / (1 + w) for a fixed
# w within +-1.5%, every other cell as n2 wrote it; n2's rows as they are; and
# s1..s3, n2's rows (a wobble of their own) under git_sha 'planted', single-1x1
# 15% slower. Only timestamps are rewritten, to order the nights so. n1 is the
# oldest night so that its real speed cannot decide a verdict: the medians and
# spreads the gate learns shrug off one night, the change-point search clips
# it to 5 robust sigmas, each side of a change holds at least 2 nights and only
# changes among the last 3 nights count. With n1 anywhere from 0.05x to 20x
# n2's speed, n2 passes and the planted change's corrected p-value stays below
# 4e-4 (alpha 0.01); 14 planted nights keep that margin (8 would leave 0.009).
HIST="$TMP/history"
"$PY" - "$NIGHTS" "$HIST" <<'PYEOF' || fail "planting the history"
import csv, os, sys
src, out = sys.argv[1:]
os.makedirs(out)


def read(night):
    with open(os.path.join(src, night + ".csv"), newline="") as f:
        r = csv.DictReader(f)
        return r.fieldnames, list(r)


def write(night, header, rows):
    with open(os.path.join(out, night + ".csv"), "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=header)
        w.writeheader()
        w.writerows(rows)


def scaled(row, factor):
    row = dict(row)
    row["throughput_img_s"] = f"{float(row['throughput_img_s']) * factor:.3f}"
    row["step_ms_p50"] = f"{float(row['step_ms_p50']) / factor:.3f}"
    return row


h1, n1 = read("n1")
h2, n2 = read("n2")
write("n1", h1, [dict(r, timestamp="2000-01-01T00:00:00Z") for r in n1])
WOBBLE = [0.003, -0.012, 0.011, -0.004, 0.015, -0.014, 0.006, -0.002, 0.009, -0.007, 0.001, 0.005, -0.010, 0.013]
for i, w in enumerate(WOBBLE, 1):
    night = f"e{i:02d}"
    write(night, h2, [scaled(dict(r, run_id=night, timestamp=f"2000-01-02T00:00:{i:02d}Z"), 1 + w) for r in n2])
write("n2", h2, n2)
for i, w in enumerate([0.004, -0.006, 0.002], 1):
    night = f"s{i}"
    rows = [scaled(dict(r, run_id=night, timestamp=f"2999-01-01T00:00:{i:02d}Z", git_sha="planted"), 1 + w) for r in n2]
    write(night, h2, [scaled(r, 0.85) if r["entry"] == "single-1x1" else r for r in rows])
PYEOF

# Honest: n2 against the 15 nights before it, enough (--min-history, 5) for the
# change-point and noise rules to judge it: nothing may alarm.
"$PY" "$SRC/scripts/report.py" "$HIST/n2.csv" --against="$HIST" >"$TMP/honest.out" 2>&1 \
  || fail "the gate failed an honest night: $(cat "$TMP/honest.out")"
grep -q "^gate: 2 rows against 15 earlier nights in .*: 0 regressions$" "$TMP/honest.out" || fail "honest gate: $(cat "$TMP/honest.out")"
if grep -q "^not enough history\|^REGRESSION\|^new \|^skipped" "$TMP/honest.out"; then
  fail "the gate did not judge n2 on its history: $(cat "$TMP/honest.out")"
fi

# The planted loss: s3 against the 18 nights before it. The gate fails it and
# names the entry, the figure, the last good and first bad night with their
# revisions, and the bisect command; the unchanged entry is not flagged.
if "$PY" "$SRC/scripts/report.py" "$HIST/s3.csv" --against="$HIST" --matrix=m.toml >"$TMP/gate.out" 2>&1; then
  fail "the gate passed a planted 15% loss: $(cat "$TMP/gate.out")"
fi
SHA="$("$PY" -c 'import csv, sys; print(next(csv.DictReader(open(sys.argv[1])))["git_sha"] or "-")' "$NIGHTS/n2.csv")"
grep -q "^REGRESSION single-1x1 throughput_img_s: change point -1[456]\.[0-9]% (.*); last good night n2 (git $SHA), first bad night s1 (git planted)$" "$TMP/gate.out" \
  || fail "no throughput regression named: $(cat "$TMP/gate.out")"
grep -q "^  changed between them: git_sha $SHA -> planted$" "$TMP/gate.out" || fail "cause not named: $(cat "$TMP/gate.out")"
grep -q "^  find the commit: scripts/bisect_slow.py single-1x1 $SHA planted --matrix=m.toml --drop=0\.1[456][0-9]$" "$TMP/gate.out" \
  || fail "no bisect command: $(cat "$TMP/gate.out")"
grep -q "^REGRESSION single-1x1 step_ms_p50: change point +" "$TMP/gate.out" || fail "step time: $(cat "$TMP/gate.out")"
if grep -q "^REGRESSION ddp-2x1" "$TMP/gate.out"; then fail "the unchanged entry was flagged: $(cat "$TMP/gate.out")"; fi
grep -q "^gate: 2 rows against 18 earlier nights .*: 2 regressions$" "$TMP/gate.out" || fail "gate summary: $(cat "$TMP/gate.out")"

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
