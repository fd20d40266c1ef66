#!/usr/bin/env bash
# ddpbench joins the ranks of torch's own launcher, torchrun --no-python from
# the project's virtual environment, offline: --standalone (c10d rendezvous on
# localhost) and the static rendezvous of --master-addr/--master-port. Each
# writes exactly one row (rank 0's): launcher=torchrun, world_size=2, gpus=2,
# parity with the single-device run. A rank killed with SIGKILL makes torchrun
# stop the other and exit non-zero, with no row written.
set -euo pipefail
BIN="$1"; SRC="$2"
TMP="$(mktemp -d)"
source "$SRC/tests/e2e/lib/launch_common.sh"
trap 'kill_children; rm -rf "$TMP"' EXIT
clear_launcher_env

TORCHRUN="$SRC/.venv/bin/torchrun"
[[ -x "$TORCHRUN" ]] || skip "torchrun not installed: $TORCHRUN is missing (scripts/setup.sh creates .venv with torch)"
export TMPDIR="$TMP"  # torchrun's log directories (torchelastic_*) go with the test's

# --standalone: a single-node c10d rendezvous on a free port of localhost.
timeout -k 5 120 "$TORCHRUN" --standalone --nproc-per-node=2 --no-python \
  "$BIN" "${WORK[@]}" --out="$TMP/standalone.csv" >"$TMP/standalone.log" 2>&1 \
  || fail "torchrun --standalone exited $?: $(tail -30 "$TMP/standalone.log")"
[[ $(grep -c "joined 2 ranks (shm" "$TMP/standalone.log") -eq 2 ]] || fail "both ranks should log joining: $(cat "$TMP/standalone.log")"
check_row "$TMP/standalone.csv" torchrun

# Static rendezvous, the multi-node form: the agent's store on MASTER_PORT.
P="$(free_port)"
timeout -k 5 120 "$TORCHRUN" --nnodes=1 --node-rank=0 --nproc-per-node=2 --master-addr=127.0.0.1 \
  --master-port="$P" --no-python "$BIN" "${WORK[@]}" --out="$TMP/static.csv" >"$TMP/static.log" 2>&1 \
  || fail "torchrun --master-port=$P exited $?: $(tail -30 "$TMP/static.log")"
[[ $(grep -c "joined 2 ranks (shm, rendezvous 127.0.0.1:$P)" "$TMP/static.log") -eq 2 ]] \
  || fail "both ranks should join via 127.0.0.1:$P: $(cat "$TMP/static.log")"
check_row "$TMP/static.csv" torchrun

# A rank killed mid-run: torchrun stops the other one and fails.
timeout -k 5 120 "$TORCHRUN" --standalone --nproc-per-node=2 --no-python \
  "$BIN" "${WORK[@]/--steps=4/--steps=1000000}" --out="$TMP/killed.csv" >"$TMP/killed.log" 2>&1 &
JOB=$!
wait_joined "$TMP/killed.log" 90 "$JOB"
sleep 1
VICTIM="$(pid_with_env RANK=1 $(descendants "$JOB"))" || fail "rank 1 not found under torchrun"
SURVIVOR="$(pid_with_env RANK=0 $(descendants "$JOB"))" || fail "rank 0 not found under torchrun"
expect_rank1_kill_fails_run torchrun "$VICTIM" "$SURVIVOR" "Signal 9 (SIGKILL)\|exitcode *: -9"
echo "launch_torchrun: all checks passed"
