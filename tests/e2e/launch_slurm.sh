#!/usr/bin/env bash
# ddpbench joins the ranks of a real Slurm srun: Debian's slurm-wlm (22.05)
# with munge, a private munged, slurmctld and slurmd started here on localhost
# (private key, socket, ports, spool and state in a temporary directory; no
# cgroup plugins). Checked:
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
clear_launcher_env

# Processes tied to this test's directory: Slurm's step daemons and tasks
# (children of slurmstepd, not of this shell) have their working directory or
# spool files there.
pids_in_tmp() {
  local d p link
  for d in /proc/[0-9]*; do
    p="${d#/proc/}"
    [[ $p == $$ || $p == "$BASHPID" ]] && continue
    link="$(readlink "$d/cwd" 2>/dev/null)" || continue
    if [[ $link == "$TMP" || $link == "$TMP"/* ]]; then echo "$p"; continue; fi
    for link in "$d"/fd/*; do
      [[ "$(readlink "$link" 2>/dev/null)" == "$TMP"/* ]] && { echo "$p"; break; }
    done
  done
  return 0
}
cleanup() {
  set +e
  if [[ -n "${SLURM_CONF:-}" ]] && running "${CTLD:-0}"; then
    timeout 10 scancel --user="$(id -un)" >/dev/null 2>&1
  fi
  kill_children                       # srun/sbatch, slurmctld, slurmd, munged
  local pids
  pids="$(pids_in_tmp)"; [[ -n "$pids" ]] && kill -KILL $pids 2>/dev/null
  sleep 0.2
  pids="$(pids_in_tmp)"; [[ -n "$pids" ]] && kill -KILL $pids 2>/dev/null
  rm -rf "$TMP"
}
trap cleanup EXIT

missing=()
for c in munged munge unmunge slurmctld slurmd srun sbatch sinfo scontrol scancel; do
  command -v "$c" >/dev/null || missing+=("$c")
done
((${#missing[@]} == 0)) || skip "Slurm cannot be used here: ${missing[*]} not installed (Debian's slurm-wlm and munge; scripts/setup.sh installs them)"

# munged insists that every directory above its socket is searchable by all,
# and that its key and log are private.
chmod 755 "$TMP"
mkdir -m 755 "$TMP/munge"; mkdir -m 700 "$TMP/munge/etc"
mkdir -p "$TMP/slurm/state" "$TMP/slurm/spool" "$TMP/work"
dd if=/dev/urandom of="$TMP/munge/etc/key" bs=1024 count=1 status=none
chmod 400 "$TMP/munge/etc/key"
SOCK="$TMP/munge/sock"
munged -F --key-file="$TMP/munge/etc/key" --socket="$SOCK" --pid-file="$TMP/munge/pid" \
  --log-file="$TMP/munge/etc/log" --seed-file="$TMP/munge/etc/seed" >"$TMP/munge/etc/out" 2>&1 &
MUNGED=$!
for ((i = 0; i < 100; i++)); do [[ -S "$SOCK" ]] && break; running "$MUNGED" || break; sleep 0.1; done
munge -n -S "$SOCK" | unmunge -S "$SOCK" >/dev/null \
  || fail "munged did not start: $(cat "$TMP/munge/etc/out" "$TMP/munge/etc/log" 2>/dev/null | tail -20)"

H="$(uname -n)"; H="${H%%.*}"   # the short host name, as slurmd names its node
MASTER="$H"
if ! getent hosts "$H" >/dev/null; then
  echo "note: this host's name '$H' does not resolve; the ranks get MASTER_ADDR=127.0.0.1"
  export MASTER_ADDR=127.0.0.1; MASTER=127.0.0.1
fi
# Ports: the daemons', and a free P in 15000..24999 for the rendezvous, with
# the first job id chosen so that 15000 + SLURM_JOB_ID % 10000 = P.
read -r CTLD_PORT SLURMD_PORT P < <("$PY" - <<'PYEOF'
import random, socket
def free(lo=0, hi=0):
    for _ in range(200):
        s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("", random.randint(lo, hi) if lo else 0)); return s
        except OSError:
            s.close()
    raise SystemExit("no free port")
socks = [free(), free(), free(15000, 24999)]
print(*[s.getsockname()[1] for s in socks])
PYEOF
)
# The node as slurmd sees the hardware (not nproc: it honours OMP_NUM_THREADS).
NODE="$(slurmd -C | grep -o "^NodeName=.*")" || fail "slurmd -C describes no node: $(slurmd -C 2>&1)"
[[ $NODE == "NodeName=$H "* ]] || fail "slurmd -C names another node than '$H': $NODE"
export SLURM_CONF="$TMP/slurm/slurm.conf"
cat >"$SLURM_CONF" <<EOF
ClusterName=ddpbench$$
SlurmctldHost=$H(127.0.0.1)
SlurmctldPort=$CTLD_PORT
SlurmdPort=$SLURMD_PORT
SlurmUser=$(id -un)
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$SOCK
CredType=cred/munge
StateSaveLocation=$TMP/slurm/state
SlurmdSpoolDir=$TMP/slurm/spool
SlurmctldPidFile=$TMP/slurm/slurmctld.pid
SlurmdPidFile=$TMP/slurm/slurmd.pid
SlurmctldLogFile=$TMP/slurm/slurmctld.log
SlurmdLogFile=$TMP/slurm/slurmd.log
MailProg=/bin/true
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
MpiDefault=none
SwitchType=switch/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
ReturnToService=2
KillWait=2
FirstJobId=$((10000 + P - 15000))
$NODE NodeAddr=127.0.0.1 State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP
EOF
slurmctld -D -f "$SLURM_CONF" >"$TMP/slurm/slurmctld.out" 2>&1 &
CTLD=$!
slurmd -D -f "$SLURM_CONF" >"$TMP/slurm/slurmd.out" 2>&1 &
SLURMD=$!
daemon_logs() { tail -n 15 "$TMP"/slurm/slurmctld.out "$TMP"/slurm/slurmd.out "$TMP"/slurm/*.log 2>/dev/null; }
state=""
for ((i = 0; i < 300; i++)); do
  running "$CTLD" || fail "slurmctld exited: $(daemon_logs)"
  running "$SLURMD" || fail "slurmd exited: $(daemon_logs)"
  state="$(timeout 5 sinfo -h -N -n "$H" -o %t 2>/dev/null || true)"
  [[ $state == idle ]] && break
  sleep 0.1
done
[[ $state == idle ]] || fail "node $H not idle within 30 s (state '$state'): $(daemon_logs)"

# srun -n2: rendezvous on the first node of the step, at the job's port.
timeout -k 5 120 srun -N1 -n2 --kill-on-bad-exit=1 --chdir="$TMP/work" \
  "$BIN" "${WORK[@]}" --out="$TMP/srun.csv" >"$TMP/srun.log" 2>&1 \
  || fail "srun exited $?: $(tail -30 "$TMP/srun.log") $(daemon_logs)"
[[ $(grep -c "joined 2 ranks (gloo, rendezvous $MASTER:$P)" "$TMP/srun.log") -eq 2 ]] \
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
# Polled here: sbatch --wait checks at growing intervals, up to 10 s late.
state=""
for ((i = 0; i < 1200; i++)); do
  state="$(timeout 10 scontrol show job -o "$JOBID" | grep -o "JobState=[A-Z_]*" || true)"
  case "$state" in
    JobState=COMPLETED) break ;;
    JobState=PENDING|JobState=CONFIGURING|JobState=RUNNING|JobState=COMPLETING|"") sleep 0.1 ;;
    *) fail "batch job $JOBID ended with $state: $(tail -30 "$TMP/batch.log" 2>/dev/null) $(daemon_logs)" ;;
  esac
done
[[ $state == JobState=COMPLETED ]] || fail "batch job $JOBID not done within 120 s ($state): $(tail -30 "$TMP/batch.log")"
[[ $(grep -c "joined 2 ranks (gloo, rendezvous $MASTER:$P2)" "$TMP/batch.log") -eq 2 ]] \
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
