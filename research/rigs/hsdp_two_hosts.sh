#!/usr/bin/env bash
# HSDP against zero3 and ddp across two hosts: two network namespaces of 2
# ranks each, joined by a veth pair shaped by tc tbf to each RATE (both ends),
# the environment launcher with LOCAL_WORLD_SIZE=2 (each shard group of
# --replicate-degree=2 is one namespace's ranks). Interleaved rounds, the
# order reversed every other round; appends every row to OUT.csv (run_id
# names the rate, entry the configuration) and prints each configuration's
# median img/s per rate and hsdp / zero3. Root only (namespaces, tc).
#   research/rigs/hsdp_two_hosts.sh OUT.csv [ROUNDS=3] [RATES="2gbit 100mbit"]   (BIN: build/ddpbench)
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
OUT="${1:?usage: hsdp_two_hosts.sh OUT.csv [ROUNDS] [RATES]}"; ROUNDS="${2:-3}"; RATES="${3:-2gbit 100mbit}"
BIN="${BIN:-$ROOT/build/ddpbench}"; PY="${PY:-$ROOT/.venv/bin/python}"
WORKLOAD=(--device=cpu --model=resnet18 --small-input --width=16 --image-size=32 --batch-size=32 --steps=20
          --warmup=5 --no-eval --progress=off --oversubscribe --expected=off)
NA="hbA$$"; NB="hbB$$"; VA="hbva$$"; VB="hbvb$$"; ADDR_A=10.215.1.1; ADDR_B=10.215.1.2
cleanup() { set +e; ip netns del "$NA" 2>/dev/null; ip netns del "$NB" 2>/dev/null; ip link del "$VA" 2>/dev/null; }
trap cleanup EXIT
ip netns add "$NA"; ip netns add "$NB"
ip link add "$VA" type veth peer name "$VB"
ip link set "$VA" netns "$NA"; ip link set "$VB" netns "$NB"
ip -n "$NA" addr add "$ADDR_A/24" dev "$VA"; ip -n "$NB" addr add "$ADDR_B/24" dev "$VB"
for n in "$NA" "$NB"; do ip -n "$n" link set lo up; done
ip -n "$NA" link set "$VA" up; ip -n "$NB" link set "$VB" up
shape() {  # rate: both ends of the pair
  local n v
  for n in "$NA:$VA" "$NB:$VB"; do
    v="${n#*:}"; n="${n%%:*}"
    ip netns exec "$n" tc qdisc replace dev "$v" root tbf rate "$1" burst 256kbit latency 400ms
  done
}
one() {  # rate entry flags...
  local rate="$1" entry="$2"; shift 2
  local pids=() r ns dev
  for r in 0 1 2 3; do
    if ((r < 2)); then ns=$NA; dev=$VA; else ns=$NB; dev=$VB; fi
    timeout -k 5 600 ip netns exec "$ns" env RANK=$r LOCAL_RANK=$((r % 2)) WORLD_SIZE=4 LOCAL_WORLD_SIZE=2 \
      MASTER_ADDR=$ADDR_A MASTER_PORT=29500 GLOO_SOCKET_IFNAME="$dev" OMP_NUM_THREADS=1 \
      "$BIN" "${WORKLOAD[@]}" "$@" --run-id="hsdp-2x2-$rate" --entry="$entry" --out="$OUT" > /dev/null 2>&1 &
    pids+=($!)
  done
  for r in "${pids[@]}"; do wait "$r" || echo "failed: $rate $entry (rank exit $?)" >&2; done
}
entries=("zero3:--strategy=zero3" "hsdp:--strategy=zero3 --replicate-degree=2" "ddp:--strategy=ddp")
for rate in $RATES; do
  shape "$rate"
  for r in $(seq "$ROUNDS"); do
    order=("${entries[@]}")
    if ((r % 2 == 0)); then order=(); for ((i=${#entries[@]}-1; i>=0; i--)); do order+=("${entries[i]}"); done; fi
    for e in "${order[@]}"; do
      # shellcheck disable=SC2086  # the flags are words
      one "$rate" "${e%%:*}" ${e#*:}
    done
  done
done
"$PY" - "$OUT" <<'PY'
import collections, csv, statistics, sys
by = collections.defaultdict(list)
for r in csv.DictReader(open(sys.argv[1])):
    if r["run_id"].startswith("hsdp-2x2-"):
        by[(r["run_id"][9:], r["entry"])].append(float(r["throughput_img_s"]))
for rate in sorted({k[0] for k in by}):
    med = {e: statistics.median(v) for (rr, e), v in by.items() if rr == rate}
    print(rate, {e: f"{m:.1f}" for e, m in sorted(med.items())},
          f"hsdp/zero3 {med['hsdp'] / med['zero3']:.3f}" if "hsdp" in med and "zero3" in med else "")
PY
