#!/usr/bin/env bash
# Network faults between two hosts: rank 0 and rank 1 in two network
# namespaces joined by a veth pair (tests/e2e/lib/netns_pair.sh), joined with
# the plain environment launcher (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT)
# and Gloo bound to the veth (GLOO_SOCKET_IFNAME), as two_hosts_netns.sh does.
#  1. Link down mid-run: a 2-rank ddp run writing a snapshot every 2 steps
#     (--timeout=5, rank 0 slowed by --inject so it lasts a while) has rank 1's
#     end of the pair taken down once a snapshot exists. Both ranks exit
#     non-zero within --timeout + 15 s of the cut, one of them with a
#     `ddpbench: error:` line naming its rank and a timed-out or closed
#     collective, no row is written, and the newest snapshot is intact (its
#     manifest's rank files have their sizes and SHA-1s). With the link up
#     again, the same command with --resume (without the --inject delay, which
#     is not part of the snapshot's configuration) resumes from that snapshot:
#     both exit 0 and exactly one row is written.
#  2. One side slow: rank 1's end shaped by tc tbf (2 mbit/s): the run still
#     completes (exit 0, one row) and its communication_ms is greater than
#     that of the same command run unshaped just before.
# Every run is bounded by `timeout`; the EXIT trap kills what is left and
# removes the namespaces.
set -euo pipefail
BIN="$1"; SRC="$2"
TMP="$(mktemp -d)"
source "$SRC/tests/e2e/lib/launch_common.sh"
clear_launcher_env
command -v tc >/dev/null || skip "tc not installed: Debian's iproute2 is missing"

source "$SRC/tests/e2e/lib/netns_pair.sh"
trap end_pair EXIT
make_pair lf "10.214.$(($$ % 250 + 1))"

TIMEOUT=5
PORT=29500  # fresh namespaces: every port is free; each run takes the next one
now() { date +%s.%N; }
since() { "$PY" -c 'import sys; print(f"{float(sys.argv[2]) - float(sys.argv[1]):.2f}")' "$1" "$2"; }

# run_rank RANK NS DEV OUT LOG FLAGS...: one rank in its namespace, bounded.
run_rank() {
  local rank="$1" ns="$2" dev="$3" out="$4" log="$5"; shift 5
  timeout -k 5 90 ip netns exec "$ns" env RANK="$rank" WORLD_SIZE=2 MASTER_ADDR="$ADDR_A" MASTER_PORT="$PORT" \
    GLOO_SOCKET_IFNAME="$dev" "$BIN" --cpu-backend=gloo "$@" --out="$out" >"$log" 2>&1
}
# start_pair NAME FLAGS...: both ranks in the background (R0, R1), logs $TMP/NAME.rankN.log, row $TMP/NAME.csv.
start_pair() {
  local name="$1"; shift
  PORT=$((PORT + 1))
  rm -f "$TMP/$name.csv"
  run_rank 0 "$NA" "$VA" "$TMP/$name.csv" "$TMP/$name.rank0.log" "$@" & R0=$!
  run_rank 1 "$NB" "$VB" "$TMP/$name.csv" "$TMP/$name.rank1.log" "$@" & R1=$!
}
# wait_both NAME SECONDS: waits for R0 and R1 (each bounded by SECONDS from now);
# sets RC0 RC1 and END0 END1 (when each was seen gone, date +%s.%N).
wait_both() {
  local name="$1" limit="$2" deadline
  deadline=$(( $(date +%s) + limit ))
  END0=""; END1=""
  while (( $(date +%s) < deadline )); do
    [[ -n "$END0" ]] || running "$R0" || END0="$(now)"
    [[ -n "$END1" ]] || running "$R1" || END1="$(now)"
    [[ -n "$END0" && -n "$END1" ]] && break
    sleep 0.05
  done
  if [[ -z "$END0" || -z "$END1" ]]; then
    kill_tree "$R0"; kill_tree "$R1"
    fail "$name: still running $limit s later (rank 0 ended: ${END0:-no}, rank 1 ended: ${END1:-no}):
$(tail -n 20 "$TMP/$name".rank*.log)"
  fi
  set +e; wait "$R0"; RC0=$?; wait "$R1"; RC1=$?; set -e
}
rows() { [[ -f "$1" ]] && "$PY" -c 'import csv, sys; print(len(list(csv.DictReader(open(sys.argv[1])))))' "$1" || echo 0; }
# The newest manifest in DIR: its step; fails unless every rank file it names has its bytes and SHA-1.
newest_intact_step() {
  "$PY" - "$1" <<'PYEOF'
import glob, hashlib, json, os, re, sys
d = sys.argv[1]
mans = sorted(glob.glob(os.path.join(d, "*-step*.json")), key=lambda m: int(re.search(r"-step0*(\d+)\.json$", m).group(1)))
assert mans, f"no snapshot manifest in {d}: {os.listdir(d)}"
body = json.load(open(mans[-1]))
assert len(body["files"]) == 2, body["files"]
for f in body["files"]:
    data = open(os.path.join(d, f["file"]), "rb").read()
    assert len(data) == f["bytes"], f"{f['file']}: {len(data)} bytes, the manifest says {f['bytes']}"
    assert hashlib.sha1(data).hexdigest() == f["sha1"], f"{f['file']}: SHA-1 differs from the manifest's"
print(body["loop"]["step"])
PYEOF
}

BASE=(--strategy=ddp --device=cpu --small-input --width=8 --image-size=16 --batch-size=16 --warmup=1 --progress=off)

# --- 1. Link down mid-run, then resume with the link up -------------------
SNAP="$TMP/snap"
CUT=("${BASE[@]}" --steps=60 --snapshot-dir="$SNAP" --snapshot-every=2 --timeout="$TIMEOUT")
START="$(now)"
start_pair cut "${CUT[@]}" --inject=delay:rank=0,phase=data,ms=100
for ((i = 0; i < 600; i++)); do  # a snapshot within 30 s
  compgen -G "$SNAP/*-step*.json" >/dev/null && break
  running "$R0" && running "$R1" || fail "a rank ended before the first snapshot: $(tail -n 20 "$TMP"/cut.rank*.log)"
  sleep 0.05
done
compgen -G "$SNAP/*-step*.json" >/dev/null || fail "no snapshot within 30 s: $(tail -n 20 "$TMP"/cut.rank*.log)"
running "$R0" && running "$R1" || fail "a rank ended before the cut: $(tail -n 20 "$TMP"/cut.rank*.log)"
CUT_AT="$(now)"
ip -n "$NB" link set "$VB" down
echo "link $VB down $(since "$START" "$CUT_AT") s after the start, snapshots then: $(cd "$SNAP" && ls -- *.json | tr '\n' ' ')"
wait_both cut $((TIMEOUT + 15))
echo "after the cut: rank 0 exited $RC0 in $(since "$CUT_AT" "$END0") s, rank 1 exited $RC1 in $(since "$CUT_AT" "$END1") s"
echo "error lines:"; grep -h "ddpbench: error:" "$TMP"/cut.rank*.log | sed 's/^/  /' || true
((RC0 != 0 && RC0 != 124 && RC0 != 137)) || fail "rank 0 exited $RC0 after the cut (want non-zero, not timeout's): $(tail -n 20 "$TMP/cut.rank0.log")"
((RC1 != 0 && RC1 != 124 && RC1 != 137)) || fail "rank 1 exited $RC1 after the cut (want non-zero, not timeout's): $(tail -n 20 "$TMP/cut.rank1.log")"
grep -hE "^ddpbench: error: .*rank [01]\b.*(timed out|Timed out|timeout|Connection|closed|closure|reset)" "$TMP"/cut.rank*.log >/dev/null ||
  fail "no rank names its rank and a timed-out or closed collective: $(tail -n 20 "$TMP"/cut.rank*.log)"
[[ "$(rows "$TMP/cut.csv")" == 0 ]] || fail "the cut run wrote a row: $(cat "$TMP/cut.csv")"
STEP="$(newest_intact_step "$SNAP")" || fail "the newest snapshot is not intact"
echo "newest snapshot: step $STEP, intact"

ip -n "$NB" link set "$VB" up
for ((i = 0; i < 100; i++)); do  # the route back, and the carrier on both ends
  ip netns exec "$NB" ping -c1 -W1 "$ADDR_A" >/dev/null 2>&1 && break
  sleep 0.1
done
START="$(now)"
start_pair resume "${CUT[@]}" --resume
wait_both resume 60
echo "resumed run: rank 0 exited $RC0, rank 1 exited $RC1 in $(since "$START" "$(now)") s"
[[ $RC0 -eq 0 && $RC1 -eq 0 ]] || fail "resume: rank 0 exited $RC0, rank 1 exited $RC1: $(tail -n 20 "$TMP"/resume.rank*.log)"
[[ "$(rows "$TMP/resume.csv")" == 1 ]] || fail "resume: want exactly 1 row, got $(rows "$TMP/resume.csv")"
# Rank 0 logs the resume (the ranks agree on the snapshot) and the row records it.
grep -q "\[rank 0\] \[info\] resuming from .*/[0-9a-f]*-step0*$STEP\.json: step $STEP," "$TMP/resume.rank0.log" ||
  fail "rank 0 did not resume from the step-$STEP snapshot: $(head -n 5 "$TMP/resume.rank0.log")"
grep -h "resuming from" "$TMP/resume.rank0.log" | sed 's/^/  /'
"$PY" -c 'import csv, sys; r = next(csv.DictReader(open(sys.argv[1])))
assert (r["resumed_from_step"], r["restarts"]) == (sys.argv[2], "1"), (r["resumed_from_step"], r["restarts"])' \
  "$TMP/resume.csv" "$STEP" || fail "the resumed row does not say it resumed from step $STEP"

# --- 2. One side shaped slow --------------------------------------------------
comm_ms() { "$PY" -c 'import csv, sys; print(next(csv.DictReader(open(sys.argv[1])))["communication_ms"])' "$1"; }
# Width 4 (0.23 MB of gradients a step) keeps the shaped run short; --expected=off
# leaves out the link measurement after the run (all-reduces of several MB).
SLOW=(--strategy=ddp --device=cpu --small-input --width=4 --image-size=16 --batch-size=16 --warmup=1 --progress=off
      --steps=3 --expected=off)
for name in plain shaped; do
  if [[ $name == shaped ]]; then
    ip netns exec "$NB" tc qdisc add dev "$VB" root tbf rate 2mbit burst 32kbit latency 400ms
  fi
  START="$(now)"
  start_pair "$name" "${SLOW[@]}"
  wait_both "$name" 60
  echo "$name run: rank 0 exited $RC0, rank 1 exited $RC1 in $(since "$START" "$(now)") s"
  [[ $RC0 -eq 0 && $RC1 -eq 0 ]] || fail "$name: rank 0 exited $RC0, rank 1 exited $RC1: $(tail -n 20 "$TMP/$name".rank*.log)"
  [[ "$(rows "$TMP/$name.csv")" == 1 ]] || fail "$name: want exactly 1 row, got $(rows "$TMP/$name.csv")"
done
PLAIN_MS="$(comm_ms "$TMP/plain.csv")"; SHAPED_MS="$(comm_ms "$TMP/shaped.csv")"
echo "communication_ms: unshaped $PLAIN_MS, rank 1 shaped to 2 mbit/s $SHAPED_MS"
"$PY" -c 'import sys; sys.exit(0 if float(sys.argv[2]) > float(sys.argv[1]) > 0 else 1)' "$PLAIN_MS" "$SHAPED_MS" ||
  fail "the shaped run's communication_ms ($SHAPED_MS) is not greater than the unshaped run's ($PLAIN_MS)"
echo "link_faults: all checks passed"
