#!/usr/bin/env bash
# ddpbench joins the ranks of a real Slurm srun: Debian's slurm-wlm (22.05)
# with munge, a private munged, slurmctld and slurmd started here on localhost
# (lib/slurm_cluster.sh). Checked:
#  - srun -n2 straight away: launcher=slurm, world_size=2, gpus=2, parity,
#    exactly one row, the master is the first host of SLURM_STEP_NODELIST and
#    the port 15000 + SLURM_JOB_ID % 10000 (the job id is chosen so that this
#    port is free);
#  - sbatch: srun -n2 inside the batch script (MASTER_PORT exported) joins
#    Slurm's ranks, while ddpbench --gpus=2 in the batch shell itself (no step
#    variables) spawns its own ranks;
#  - a rank killed with SIGKILL under srun --kill-on-bad-exit=1 makes srun stop
#    the other and exit non-zero, with no row written.
set -euo pipefail
BIN="$1"; SRC="$2"
TMP="$(mktemp -d)"
source "$SRC/tests/e2e/lib/launch_common.sh"
source "$SRC/tests/e2e/lib/slurm_cluster.sh"
clear_launcher_env
trap stop_slurm_cluster EXIT
start_slurm_cluster 1

# srun -n2: rendezvous on the first node of the step, at the job's port.
timeout -k 5 120 srun -N1 -n2 --kill-on-bad-exit=1 --chdir="$TMP/work" \
  "$BIN" "${WORK[@]}" --out="$TMP/srun.csv" >"$TMP/srun.log" 2>&1 \
  || fail "srun exited $?: $(tail -30 "$TMP/srun.log") $(daemon_logs)"
[[ $(grep -c "joined 2 ranks (shm, rendezvous $MASTER:$P)" "$TMP/srun.log") -eq 2 ]] \
  || fail "both ranks should join via $MASTER:$P (first job id $((10000 + P - 15000))): $(cat "$TMP/srun.log")"
check_row "$TMP/srun.csv" slurm

# sbatch: srun inside the allocation joins Slurm's ranks; the batch shell,
# which has no step variables, spawns its own.
P2="$(free_port)"
cat >"$TMP/work/job.sh" <<EOF
#!/bin/bash
set -euo pipefail
MASTER_PORT=$P2 srun -n2 --kill-on-bad-exit=1 "$BIN" ${WORK[*]} --out="$TMP/batch_srun.csv"
"$BIN" ${WORK[*]} --gpus=2 --out="$TMP/batch_spawn.csv"
EOF
JOBID="$(timeout 30 sbatch --parsable -N1 -n2 --chdir="$TMP/work" --output="$TMP/batch.log" "$TMP/work/job.sh")" \
  || fail "sbatch failed: $(daemon_logs)"
wait_batch_job "$JOBID" "$TMP/batch.log" 120
[[ $(grep -c "joined 2 ranks (shm, rendezvous $MASTER:$P2)" "$TMP/batch.log") -eq 2 ]] \
  || fail "srun in the batch job should join via $MASTER:$P2: $(cat "$TMP/batch.log")"
check_row "$TMP/batch_srun.csv" slurm
check_row "$TMP/batch_spawn.csv" spawn

# A rank killed mid-run: srun --kill-on-bad-exit=1 stops the other and fails.
P3="$(free_port)"
MASTER_PORT="$P3" timeout -k 5 120 srun -N1 -n2 --kill-on-bad-exit=1 --chdir="$TMP/work" \
  "$BIN" "${WORK[@]/--steps=4/--steps=1000000}" --out="$TMP/killed.csv" >"$TMP/killed.log" 2>&1 &
JOB=$!
wait_joined "$TMP/killed.log" 90 "$JOB"
sleep 1
RANKS="$(pids_in_tmp)"
VICTIM="$(pid_with_env SLURM_PROCID=1 $RANKS)" || fail "rank 1 not found under srun"
SURVIVOR="$(pid_with_env SLURM_PROCID=0 $RANKS)" || fail "rank 0 not found under srun"
expect_rank1_kill_fails_run srun "$VICTIM" "$SURVIVOR" "task 1: Killed"
echo "launch_slurm: all checks passed"
