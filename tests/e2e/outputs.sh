#!/usr/bin/env bash
# Outputs end to end through the real binary, for single and for a spawned
# 2-rank ddp: a bad --out or --baseline is refused before the first step (one
# line, exit 2, or 4 for an --out that is not a ddpbench CSV, even with
# --steps=100000, also for a rank joined through launcher variables); runs
# appending at once to another ddpbench version's results file lose no row
# and leave the union of columns; a row that cannot be written (--out=/dev/full)
# is printed and found in the fallback file (exit 4); a repeated or misspelled
# flag is named; a spawned ddp listens on loopback only, a single run not at all.
set -euo pipefail
BIN="$1"; SRC="$2"
TMP="$(mktemp -d)"; trap 'rm -rf "$TMP"' EXIT
PY="$SRC/.venv/bin/python"; [[ -x "$PY" ]] || PY=python3
fail() { echo "FAIL: $*"; exit 1; }
source "$(dirname "$0")/lib/listeners.sh"
# --expected=off: no expectation is checked here (the *_cli tests and e2e.docs run
# that calibration); it would double the time of each small multi-rank run.
COMMON=(--device=cpu --small-input --width=4 --image-size=16 --batch-size=4 --warmup=1 --progress=off
        --expected=off)
SINGLE=(--strategy=single)
DDP=(--strategy=ddp --gpus=2)
printf 'a,b\n1,2\n' > "$TMP/foreign.csv"

# refused RC 'expected text' ARGS...: exit RC with one error line containing
# the text, no training started (--steps=100000 would not end in time).
refused() {
  local want="$1" expect="$2" out rc; shift 2
  set +e; out="$(timeout 60 "$BIN" "${COMMON[@]}" "$@" 2>&1 </dev/null)"; rc=$?; set -e
  [[ $rc -eq $want ]] || fail "$* exited $rc (want $want): $out"
  [[ $(grep -c "ddpbench: error:" <<<"$out") -eq 1 ]] || fail "$*: want exactly one error line: $out"
  grep -qF -- "ddpbench: error: $expect" <<<"$out" || fail "$*: message lacks '$expect': $out"
  ! grep -q "joined\|img/s" <<<"$out" || fail "$*: started a run: $out"
}
for mode in SINGLE DDP; do
  declare -n RUN=$mode
  refused 2 "--out=$TMP/none/r.csv: directory $TMP/none does not exist" "${RUN[@]}" --steps=100000 --out="$TMP/none/r.csv"
  refused 2 "--out=$TMP: is a directory" "${RUN[@]}" --steps=100000 --out="$TMP"
  refused 4 "--out=$TMP/foreign.csv: not a ddpbench results CSV" "${RUN[@]}" --steps=100000 --out="$TMP/foreign.csv"
  refused 2 "--baseline=$TMP/none.csv: does not exist" "${RUN[@]}" --steps=100000 --baseline="$TMP/none.csv"
  refused 2 "--baseline=$TMP/foreign.csv: not a ddpbench results CSV" "${RUN[@]}" --steps=100000 --baseline="$TMP/foreign.csv"
  refused 2 "--steps is given 2 times (3, 100000); give it once" "${RUN[@]}" --steps=3 --steps 100000
  refused 2 "--stpes: unknown flag; did you mean --steps?" "${RUN[@]}" --stpes=3
  unset -n RUN
done
[[ "$(cat "$TMP/foreign.csv")" == $'a,b\n1,2' ]] || fail "foreign file modified"
# A rank joined through launcher variables checks too, before rendezvous.
PORT="$("$PY" -c 'import socket; s = socket.socket(); s.bind(("", 0)); print(s.getsockname()[1])')"
RANK=0 WORLD_SIZE=1 MASTER_ADDR=127.0.0.1 MASTER_PORT=$PORT \
  refused 2 "--out=$TMP/none/r.csv: directory $TMP/none does not exist" --strategy=ddp --steps=100000 --out="$TMP/none/r.csv"

# Another version's file (two columns missing, one unknown) appended to by a
# single run and a spawned ddp at once.
"$BIN" "${SINGLE[@]}" "${COMMON[@]}" --steps=1 --out="$TMP/current.csv" 2>/dev/null
"$PY" - "$TMP/current.csv" "$TMP/old.csv" <<'PYEOF'
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1])))
old = [c for c in rows[0] if c not in ("store_bind", "zero_reduce")] + ["legacy_col"]
rows[0]["legacy_col"] = "kept"
with open(sys.argv[2], "w", newline="") as f:
    w = csv.DictWriter(f, old, extrasaction="ignore", lineterminator="\n")
    w.writeheader(); w.writerow(rows[0])
PYEOF
"$BIN" "${SINGLE[@]}" "${COMMON[@]}" --steps=2 --out="$TMP/old.csv" 2>/dev/null & A=$!
"$BIN" "${DDP[@]}" "${COMMON[@]}" --steps=2 --out="$TMP/old.csv" 2>/dev/null & B=$!
wait $A || fail "single run on the old file failed"
wait $B || fail "ddp run on the old file failed"
"$PY" - "$TMP/current.csv" "$TMP/old.csv" <<'PYEOF'
import csv, sys
current = next(csv.reader(open(sys.argv[1])))
header = next(csv.reader(open(sys.argv[2])))
assert header == current + ["legacy_col"], header
rows = list(csv.DictReader(open(sys.argv[2])))
assert [r["strategy"] for r in rows[:1]] == ["single"] and sorted(r["strategy"] for r in rows[1:]) == ["ddp", "single"], rows
assert rows[0]["legacy_col"] == "kept" and rows[0]["store_bind"] == "" and rows[0]["zero_reduce"] == "", rows[0]
ddp = [r for r in rows if r["strategy"] == "ddp"][0]
assert ddp["store_bind"] == "127.0.0.1" and ddp["legacy_col"] == "", ddp
print("migrated: 3 rows, header of", len(header), "columns")
PYEOF

# A row that cannot be written: printed with its header, saved, exit 4.
for mode in SINGLE DDP; do
  declare -n RUN=$mode
  mkdir "$TMP/fb"
  set +e; out="$(TMPDIR="$TMP/fb" timeout 120 "$BIN" "${RUN[@]}" "${COMMON[@]}" --steps=2 --out=/dev/full 2>&1)"; rc=$?; set -e
  [[ $rc -eq 4 ]] || fail "$mode --out=/dev/full exited $rc (want 4): $out"
  saved="$(ls "$TMP"/fb/ddpbench-row-*.csv)" || fail "$mode: no fallback file: $out"
  grep -qF "the row is saved in $saved" <<<"$out" || fail "$mode: the error does not name $saved: $out"
  grep -qF "$(head -1 "$saved")" <<<"$out" || fail "$mode: the header is not on stderr: $out"
  grep -qF "$(tail -1 "$saved")" <<<"$out" || fail "$mode: the row is not on stderr: $out"
  "$PY" -c 'import csv, sys; r = list(csv.DictReader(open(sys.argv[1]))); assert len(r) == 1 and r[0]["strategy"] == sys.argv[2], r' \
    "$saved" "${RUN[0]#--strategy=}"
  rm -rf "$TMP/fb"
  unset -n RUN
done

# Listening sockets while running: none for single; loopback only for ddp
# (the spawning parent's store; Gloo pairs).
"$BIN" "${SINGLE[@]}" "${COMMON[@]}" --steps=50 2>/dev/null & P=$!
seen="$(watch_listeners $P)"; wait $P
[[ -z "$seen" ]] || fail "a single run listens: $seen"
"$BIN" "${DDP[@]}" "${COMMON[@]}" --steps=100 --out="$TMP/r.csv" 2>/dev/null & P=$!
seen="$(watch_listeners $P)"; wait $P
[[ -n "$seen" ]] || fail "saw no listening socket of the spawned ddp (its store must listen somewhere)"
for a in $seen; do is_loopback "$a" || fail "the spawned ddp listens outside loopback: $a (from /proc/net/tcp*: $seen)"; done
echo "ddp listened on: $seen"
echo "outputs: all checks passed"
