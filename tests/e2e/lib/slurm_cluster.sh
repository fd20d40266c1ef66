# A private Slurm cluster on localhost for the e2e tests (sourced, after
# launch_common.sh; expects BIN, SRC, TMP): Debian's slurm-wlm (22.05) with a
# private munged, slurmctld and one slurmd per node, all on this host (private
# key, socket, ports, spool and state under $TMP; no cgroup plugins).
#   start_slurm_cluster [NODES]   # 1: the node is this host's name (default);
#                                 # 2+: nodes n1..nN, each slurmd on its own port
#   stop_slurm_cluster            # in the EXIT trap
# Sets SLURM_CONF, MASTER (the rendezvous host ranks will use), P (a free port
# in 15000..24999 with the first job id chosen so that 15000 + SLURM_JOB_ID %
# 10000 = P) and CTLD (slurmctld's pid). Needs munged, slurmctld and slurmd;
# skips (exit 77) when they are not installed.

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

stop_slurm_cluster() {
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

start_munge() {
  # munged insists that every directory above its socket is searchable by all,
  # and that its key and log are private.
  chmod 755 "$TMP"
  mkdir -m 755 "$TMP/munge"; mkdir -m 700 "$TMP/munge/etc"
  dd if=/dev/urandom of="$TMP/munge/etc/key" bs=1024 count=1 status=none
  chmod 400 "$TMP/munge/etc/key"
  SOCK="$TMP/munge/sock"
  munged -F --key-file="$TMP/munge/etc/key" --socket="$SOCK" --pid-file="$TMP/munge/pid" \
    --log-file="$TMP/munge/etc/log" --seed-file="$TMP/munge/etc/seed" >"$TMP/munge/etc/out" 2>&1 &
  local munged=$! i
  for ((i = 0; i < 100; i++)); do [[ -S "$SOCK" ]] && break; running "$munged" || break; sleep 0.1; done
  munge -n -S "$SOCK" | unmunge -S "$SOCK" >/dev/null \
    || fail "munged did not start: $(cat "$TMP/munge/etc/out" "$TMP/munge/etc/log" 2>/dev/null | tail -20)"
}

# Ports: the daemons' (one per node), and a free P in 15000..24999.
free_ports() {  # NODES
  "$PY" - "$1" <<'PYEOF'
import random, socket, sys
def free(lo=0, hi=0):
    for _ in range(200):
        s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("", random.randint(lo, hi) if lo else 0)); return s
        except OSError:
            s.close()
    raise SystemExit("no free port")
socks = [free() for _ in range(1 + int(sys.argv[1]))] + [free(15000, 24999)]
print(*[s.getsockname()[1] for s in socks])
PYEOF
}

write_slurm_conf() {  # NODES CTLD_PORT SLURMD_PORTS...
  local nodes="$1" ctld_port="$2" n; shift 2
  # The node as slurmd sees the hardware (not nproc: it honours OMP_NUM_THREADS).
  NODE="$(slurmd -C | grep -o "^NodeName=.*")" || fail "slurmd -C describes no node: $(slurmd -C 2>&1)"
  [[ $NODE == "NodeName=$H "* ]] || fail "slurmd -C names another node than '$H': $NODE"
  cat >"$SLURM_CONF" <<EOF
ClusterName=ddpbench$$
SlurmctldHost=$H(127.0.0.1)
SlurmctldPort=$ctld_port
SlurmdPort=$1
SlurmUser=$(id -un)
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$SOCK
CredType=cred/munge
StateSaveLocation=$TMP/slurm/state
SlurmdSpoolDir=$TMP/slurm/spool/%n
SlurmctldPidFile=$TMP/slurm/slurmctld.pid
SlurmdPidFile=$TMP/slurm/slurmd.%n.pid
SlurmctldLogFile=$TMP/slurm/slurmctld.log
SlurmdLogFile=$TMP/slurm/slurmd.%n.log
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
EOF
  if ((nodes == 1)); then
    echo "$NODE NodeAddr=127.0.0.1 State=UNKNOWN" >>"$SLURM_CONF"
    NODE_NAMES=("$H")
  else
    NODE_NAMES=()
    for ((n = 1; n <= nodes; n++)); do
      echo "${NODE/NodeName=$H/NodeName=n$n} NodeAddr=127.0.0.1 NodeHostname=$H Port=${!n} State=UNKNOWN" >>"$SLURM_CONF"
      NODE_NAMES+=("n$n")
    done
  fi
  echo "PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP" >>"$SLURM_CONF"
}

daemon_logs() { tail -n 15 "$TMP"/slurm/*.out "$TMP"/slurm/*.log 2>/dev/null; }

start_slurm_cluster() {
  local nodes="${1:-1}" missing=() c i n ctld_port slurmd_ports state
  for c in munged munge unmunge slurmctld slurmd srun sbatch sinfo scontrol scancel; do
    command -v "$c" >/dev/null || missing+=("$c")
  done
  ((${#missing[@]} == 0)) || skip "Slurm cannot be used here: ${missing[*]} not installed (Debian's slurm-wlm and munge; scripts/setup.sh installs them)"
  start_munge
  mkdir -p "$TMP/slurm/state" "$TMP/slurm/spool" "$TMP/work"
  H="$(uname -n)"; H="${H%%.*}"   # the short host name, as slurmd names its node
  MASTER="$H"
  if ((nodes > 1)) || ! getent hosts "$H" >/dev/null; then
    # n1, n2 (or an unresolvable host name) are no host names: ranks rendezvous on loopback.
    echo "note: the ranks get MASTER_ADDR=127.0.0.1 (node names do not resolve)"
    export MASTER_ADDR=127.0.0.1; MASTER=127.0.0.1
  fi
  read -r ctld_port slurmd_ports < <(free_ports "$nodes")
  P="${slurmd_ports##* }"; slurmd_ports="${slurmd_ports% *}"
  export SLURM_CONF="$TMP/slurm/slurm.conf"
  # shellcheck disable=SC2086
  write_slurm_conf "$nodes" "$ctld_port" $slurmd_ports
  slurmctld -D -f "$SLURM_CONF" >"$TMP/slurm/slurmctld.out" 2>&1 &
  CTLD=$!
  SLURMDS=()
  for n in "${NODE_NAMES[@]}"; do
    mkdir -p "$TMP/slurm/spool/$n"
    if ((nodes == 1)); then slurmd -D -f "$SLURM_CONF" >"$TMP/slurm/slurmd.out" 2>&1 &
    else slurmd -D -N "$n" -f "$SLURM_CONF" >"$TMP/slurm/slurmd.$n.out" 2>&1 &
    fi
    SLURMDS+=($!)
  done
  for ((i = 0; i < 300; i++)); do
    running "$CTLD" || fail "slurmctld exited: $(daemon_logs)"
    for c in "${SLURMDS[@]}"; do running "$c" || fail "slurmd exited: $(daemon_logs)"; done
    state="$(timeout 5 sinfo -h -N -o %t 2>/dev/null | sort -u | tr '\n' ' ' || true)"
    [[ $state == "idle " ]] && [[ $(timeout 5 sinfo -h -N -o %N | wc -l) -eq $nodes ]] && return 0
    sleep 0.1
  done
  fail "nodes ${NODE_NAMES[*]} not idle within 30 s (states '$state'): $(daemon_logs)"
}

# Waits for a batch job to complete (polled: sbatch --wait checks at growing
# intervals, up to 10 s late); fails with its log when it ends otherwise.
wait_batch_job() {  # JOBID LOG SECONDS
  local state="" i
  for ((i = 0; i < $3 * 10; i++)); do
    state="$(timeout 10 scontrol show job -o "$1" | grep -o "JobState=[A-Z_]*" || true)"
    case "$state" in
      JobState=COMPLETED) return 0 ;;
      JobState=PENDING|JobState=CONFIGURING|JobState=RUNNING|JobState=COMPLETING|"") sleep 0.1 ;;
      *) fail "batch job $1 ended with $state: $(tail -30 "$2" 2>/dev/null) $(daemon_logs)" ;;
    esac
  done
  fail "batch job $1 not done within $3 s ($state): $(tail -30 "$2")"
}
