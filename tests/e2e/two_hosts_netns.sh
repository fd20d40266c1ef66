#!/usr/bin/env bash
# Two hosts: rank 0 and rank 1 in two network namespaces joined by a veth
# pair, each namespace with only loopback and its end of the pair, with its own
# address (10.213.N.1 and .2). They join with the plain environment launcher
# (RANK, WORLD_SIZE, MASTER_ADDR = rank 0's address, MASTER_PORT) and Gloo
# bound to the veth (GLOO_SOCKET_IFNAME), and train together: both exit 0,
# both log the rendezvous at 10.213.N.1, the single row (rank 0's) says
# launcher=env, world_size=2, gpus=2, parity with the single-device run, the
# store bound to rank 0's address only (store_bind), and the gradients' bytes
# crossed the veth pair in both directions.
set -euo pipefail
BIN="$1"; SRC="$2"
TMP="$(mktemp -d)"
source "$SRC/tests/e2e/lib/launch_common.sh"
clear_launcher_env

source "$SRC/tests/e2e/lib/netns_pair.sh"
trap end_pair EXIT
make_pair ddp "10.213.$(($$ % 250 + 1))"
# Each namespace: loopback and its veth end, nothing else.
links() { ip -n "$1" -o link show | awk -F': ' '{print $2}' | cut -d@ -f1 | sort | tr '\n' ' '; }
[[ "$(links "$NA")" == "$VA lo " ]] || fail "namespace $NA has interfaces: $(links "$NA")"
[[ "$(links "$NB")" == "$VB lo " ]] || fail "namespace $NB has interfaces: $(links "$NB")"

bytes() { pair_bytes "$@"; }
TX_A0="$(bytes "$NA" "$VA" tx)"; TX_B0="$(bytes "$NB" "$VB" tx)"

# A fresh namespace has every port free: the usual 29500.
run_rank() {  # rank namespace interface
  timeout -k 5 120 ip netns exec "$2" env RANK="$1" WORLD_SIZE=2 MASTER_ADDR="$ADDR_A" MASTER_PORT=29500 \
    GLOO_SOCKET_IFNAME="$3" "$BIN" "${WORK[@]}" --cpu-backend=gloo --out="$TMP/r.csv" >"$TMP/rank$1.log" 2>&1
}
run_rank 0 "$NA" "$VA" & R0=$!
run_rank 1 "$NB" "$VB" & R1=$!
wait_pid "$R0" 150 "rank 0"; RC0=$RC
wait_pid "$R1" 150 "rank 1"; RC1=$RC
[[ $RC0 -eq 0 && $RC1 -eq 0 ]] || fail "rank 0 exited $RC0, rank 1 exited $RC1: $(tail -n 20 "$TMP"/rank*.log)"
for r in 0 1; do
  grep -q "\[rank $r\] \[info\] joined 2 ranks (gloo, rendezvous $ADDR_A:29500)" "$TMP/rank$r.log" \
    || fail "rank $r did not join via $ADDR_A:29500: $(cat "$TMP/rank$r.log")"
done
check_row "$TMP/r.csv" env
# Rank 0 served the store on MASTER_ADDR's interface only, not every interface.
"$PY" -c 'import csv, sys; r = next(csv.DictReader(open(sys.argv[1]))); assert r["store_bind"] == sys.argv[2], r["store_bind"]' \
  "$TMP/r.csv" "$ADDR_A" || fail "the row's store_bind is not $ADDR_A"

# Gradients crossed the pair both ways: at least 1 MB each (each all-reduce
# of this model moves about its 0.9 MB of gradients through each end).
TX_A=$(( $(bytes "$NA" "$VA" tx) - TX_A0 )); TX_B=$(( $(bytes "$NB" "$VB" tx) - TX_B0 ))
RX_A="$(bytes "$NA" "$VA" rx)"
echo "veth traffic: $ADDR_A sent $TX_A bytes, $ADDR_B sent $TX_B bytes"
((TX_A > 1000000 && TX_B > 1000000)) || fail "too little traffic over the veth pair: $TX_A and $TX_B bytes"
((RX_A >= TX_B)) || fail "$VA received $RX_A bytes, less than the $TX_B bytes $VB sent"

# pmp with one stage in each namespace (--stage-ranks): the activations and
# gradients of every micro-batch cross the pair, and the update is single's.
TX_A0="$(bytes "$NA" "$VA" tx)"; TX_B0="$(bytes "$NB" "$VB" tx)"
WORK=(--strategy=pmp --stage-ranks --device=cpu --small-input --width=8 --image-size=16 --batch-size=16 --chunks=4
      --schedule=1f1b --steps=4 --warmup=1 --progress=off --verify)
rm -f "$TMP/r.csv"
run_rank 0 "$NA" "$VA" & R0=$!
run_rank 1 "$NB" "$VB" & R1=$!
wait_pid "$R0" 150 "pmp rank 0"; RC0=$RC
wait_pid "$R1" 150 "pmp rank 1"; RC1=$RC
[[ $RC0 -eq 0 && $RC1 -eq 0 ]] || fail "pmp: rank 0 exited $RC0, rank 1 exited $RC1: $(tail -n 20 "$TMP"/rank*.log)"
"$PY" - "$TMP/r.csv" <<'PYEOF' || fail "the pmp row"
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1])))
assert len(rows) == 1, len(rows)
r = rows[0]
assert (r["strategy"], r["launcher"], r["world_size"], r["parity_ok"]) == ("pmp", "env", "2", "true"), r
print(f"pmp row ok: parity {r['parity_max_abs_diff']}, {r['throughput_img_s']} img/s")
PYEOF
TX_A=$(( $(bytes "$NA" "$VA" tx) - TX_A0 )); TX_B=$(( $(bytes "$NB" "$VB" tx) - TX_B0 ))
echo "pmp veth traffic: $ADDR_A sent $TX_A bytes (activations), $ADDR_B sent $TX_B bytes (gradients)"
((TX_A > 100000 && TX_B > 100000)) || fail "too little pmp traffic over the veth pair: $TX_A and $TX_B bytes"
echo "two_hosts_netns: all checks passed"
