#!/usr/bin/env bash
# ddpbench joins the ranks of Debian's Open MPI mpirun (OMPI_COMM_WORLD_*; the
# rendezvous on 127.0.0.1 since every rank is on this host): with MASTER_PORT
# exported by -x, and with the default port 29500 when it is free. Each run
# writes exactly one row (rank 0's): launcher=mpi, world_size=2, gpus=2,
# parity with the single-device run. A rank killed with SIGKILL makes mpirun
# stop the other and exit non-zero, with no row written.
set -euo pipefail
BIN="$1"; SRC="$2"
TMP="$(mktemp -d)"
source "$SRC/tests/e2e/lib/launch_common.sh"
trap 'kill_children; rm -rf "$TMP"' EXIT
clear_launcher_env

command -v mpirun >/dev/null || skip "mpirun not installed: Debian's openmpi-bin is missing (scripts/setup.sh installs it)"
mpirun --version 2>&1 | grep -q "Open MPI" || skip "mpirun is not Open MPI's: $(mpirun --version 2>&1 | head -1)"
# Root needs --allow-run-as-root; TCP and shared memory only (no InfiniBand
# probing), and no ssh agent since every rank is local.
MPIRUN=(mpirun --allow-run-as-root --oversubscribe -np 2 --mca btl self,vader,tcp --mca plm_rsh_agent false
        --mca orte_tmpdir_base "$TMP" -x OMP_NUM_THREADS)

P="$(free_port)"
timeout -k 5 120 "${MPIRUN[@]}" -x MASTER_PORT="$P" "$BIN" "${WORK[@]}" --out="$TMP/port.csv" \
  >"$TMP/port.log" 2>&1 || fail "mpirun exited $?: $(tail -30 "$TMP/port.log")"
[[ $(grep -c "joined 2 ranks (shm, rendezvous 127.0.0.1:$P)" "$TMP/port.log") -eq 2 ]] \
  || fail "both ranks should join via 127.0.0.1:$P: $(cat "$TMP/port.log")"
check_row "$TMP/port.csv" mpi

# No MASTER_PORT: ddpbench's default, 29500, unless something else holds it
# (another test or job on this machine), where only this part is left out.
# (SO_REUSEADDR as TCPStore binds, so a recent run's TIME_WAIT does not count.)
if "$PY" -c 'import socket; s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); s.bind(("", 29500))' 2>/dev/null; then
  timeout -k 5 120 "${MPIRUN[@]}" "$BIN" "${WORK[@]}" --out="$TMP/default.csv" >"$TMP/default.log" 2>&1 \
    || fail "mpirun without MASTER_PORT exited $?: $(tail -30 "$TMP/default.log")"
  [[ $(grep -c "joined 2 ranks (shm, rendezvous 127.0.0.1:29500)" "$TMP/default.log") -eq 2 ]] \
    || fail "both ranks should join via 127.0.0.1:29500: $(cat "$TMP/default.log")"
  check_row "$TMP/default.csv" mpi
else
  echo "note: port 29500 is in use here, so the run on the default MASTER_PORT is left out"
fi

# A rank killed mid-run: mpirun stops the other one and fails.
P="$(free_port)"
timeout -k 5 120 "${MPIRUN[@]}" -x MASTER_PORT="$P" "$BIN" "${WORK[@]/--steps=4/--steps=1000000}" \
  --out="$TMP/killed.csv" >"$TMP/killed.log" 2>&1 &
JOB=$!
wait_joined "$TMP/killed.log" 90 "$JOB"
sleep 1
VICTIM="$(pid_with_env OMPI_COMM_WORLD_RANK=1 $(descendants "$JOB"))" || fail "rank 1 not found under mpirun"
SURVIVOR="$(pid_with_env OMPI_COMM_WORLD_RANK=0 $(descendants "$JOB"))" || fail "rank 0 not found under mpirun"
expect_rank1_kill_fails_run mpirun "$VICTIM" "$SURVIVOR" "process rank 1 with PID [0-9]* on node .* signal 9"
echo "launch_mpirun: all checks passed"
