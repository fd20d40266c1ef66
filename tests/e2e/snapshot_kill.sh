#!/usr/bin/env bash
# Snapshots killed at every point: SIGKILL at 15 points of snapshot writing
# (before, half-way through, after the rank file; before and after the
# manifest's rename; after pruning; the crash points of base/crash_point.h):
# each of single's 11 once, in a snapshot chosen by a fixed seed, and 4 on
# rank 1 of a 2-rank ddp run. After each kill the same command runs again: it must resume
# from the newest complete snapshot (manifest and every rank file it names,
# intact) or the one before, never a mixture, and end bit-identical (every
# tensor of the final snapshot) to an uninterrupted run.
set -euo pipefail
BIN="$1"; SRC="$2"
TMP="$(mktemp -d)"; trap 'rm -rf "$TMP"' EXIT
PY="$SRC/.venv/bin/python"; [[ -x "$PY" ]] || PY=python3
fail() { echo "FAIL: $*"; exit 1; }
source "$SRC/tests/e2e/lib/same_tensors.sh"
"$PY" "$SRC/tests/e2e/lib/make_idx.py" "$TMP/data" 96 16 3
# --expected=off: no expectation is checked here (the *_cli tests and e2e.docs run
# that calibration); it would double the time of each small multi-rank run.
COMMON=(--device=cpu --dataset=mnist --data-dir="$TMP/data" --small-input --width=4 --batch-size=8 --warmup=1
        --progress=off --optimizer=adam --lr=0.003 --steps=5 --snapshot-every=1 --snapshot-keep=2 --no-eval
        --expected=off)

# The steps of the complete snapshots in DIR (manifest + intact rank files), ascending.
complete_steps() {
  "$PY" - "$1" <<'PYEOF'
import glob, json, os, re, sys
steps = []
for m in glob.glob(os.path.join(sys.argv[1], "*-step*.json")):
    try:
        body = json.load(open(m))
        ok = all(os.path.getsize(os.path.join(sys.argv[1], f["file"])) == f["bytes"] for f in body["files"])
    except Exception:
        ok = False
    if ok:
        steps.append(int(re.search(r"-step0*(\d+)\.json$", m).group(1)))
print(" ".join(map(str, sorted(steps))))
PYEOF
}

final_file() { ls "$1"/*-step000000005.rank0.pt; }

check_strategy() {  # NAME POINTS FLAGS...
  local name="$1" points="$2"; shift 2
  "$BIN" "${COMMON[@]}" "$@" --snapshot-dir="$TMP/ref-$name" --out="$TMP/ref.csv" 2>"$TMP/ref.log" ||
    fail "$name: the uninterrupted run failed: $(cat "$TMP/ref.log")"
  for k in $points; do
    local dir="$TMP/kill-$name-$k" rc
    set +e
    (DDPBENCH_TEST_CRASH_AT="$k" DDPBENCH_TEST_CRASH_RANK="${CRASH_RANK:--1}" \
      timeout 120 "$BIN" "${COMMON[@]}" "$@" --snapshot-dir="$dir" --out="$TMP/k.csv" >"$dir.kill.log" 2>&1) 2>/dev/null
    rc=$?; set -e
    [[ $rc -ne 0 ]] || fail "$name point $k: the run was not killed (exit 0): $(tail -3 "$dir.kill.log")"
    grep -q "test crash point $k" "$dir.kill.log" || fail "$name point $k: no crash point reached: $(tail -3 "$dir.kill.log")"
    read -r -a complete <<<"$(complete_steps "$dir")"
    timeout 120 "$BIN" "${COMMON[@]}" "$@" --snapshot-dir="$dir" --out="$TMP/k.csv" >"$dir.resume.log" 2>&1 ||
      fail "$name point $k: the run after the kill failed: $(tail -3 "$dir.resume.log")"
    local n=${#complete[@]} from
    from="$(sed -n 's/.*resuming from .*: step \([0-9]*\).*/\1/p' "$dir.resume.log" | head -1)"
    if ((n == 0)); then
      [[ -z "$from" ]] || fail "$name point $k: resumed from step $from with no complete snapshot"
    else
      [[ "$from" == "${complete[n-1]}" || (n -ge 2 && "$from" == "${complete[n-2]}") ]] ||
        fail "$name point $k: resumed from '${from}', complete snapshots: ${complete[*]}"
    fi
    same_tensors_later "$name point $k: the final state differs from the uninterrupted run" \
      "$(final_file "$TMP/ref-$name")" "$(final_file "$dir")"
    echo "ok: $name killed at point $k (complete: ${complete[*]:-none}; resumed from ${from:-the start})"
  done
}

# 5 snapshots of 11 points each on single: every point once, in a snapshot chosen by a fixed seed.
points="$("$PY" -c 'import random; r = random.Random(25); print(" ".join(str(1 + k + 11 * r.randrange(5)) for k in range(11)))')"
check_strategy single "$points" --strategy=single
# Rank 1 of ddp reaches 6 points a snapshot (its rank file, the gather, pruning).
CRASH_RANK=1 check_strategy ddp "2 9 16 27" --strategy=ddp --gpus=2
check_same_tensors "a run resumed after a kill ended with other tensors than the uninterrupted run"
echo "snapshot_kill: all passed"
