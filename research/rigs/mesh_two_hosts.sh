#!/usr/bin/env bash
# The two-dimensional strategies against the one-dimensional ones across two
# hosts: two network namespaces of 2 ranks each (tests/e2e/lib/netns_pair.sh),
# joined by a veth pair shaped by tc tbf to each RATE (both ends), the
# environment launcher with LOCAL_WORLD_SIZE=2 (each group of
# --replicate-degree=2 is one namespace's ranks). HSDP against zero3 and ddp;
# pipelines replicated (pmp --stage-ranks, 2 stages x 2) against the 4-stage
# pipeline. Interleaved rounds, the order reversed every other round; appends
# every row to OUT.csv (run_id names the rate, entry the configuration) and
# prints each configuration's median img/s per rate, hsdp / zero3 and
# pp-dp / pp, and hsdp-shm (--cpu-backend=auto: shared memory inside each
# namespace's shard group, Gloo across) / hsdp (Gloo for every group). Root only (namespaces, tc).
#   research/rigs/mesh_two_hosts.sh OUT.csv [ROUNDS=3] [RATES="2gbit 100mbit"]   (BIN: build/ddpbench;
#   ONLY="hsdp zero3": those entries alone)
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
OUT="${1:?usage: mesh_two_hosts.sh OUT.csv [ROUNDS] [RATES]}"; ROUNDS="${2:-3}"; RATES="${3:-2gbit 100mbit}"
BIN="${BIN:-$ROOT/build/ddpbench}"; PY="${PY:-$ROOT/.venv/bin/python}"
WORKLOAD=(--device=cpu --model=resnet18 --small-input --width=16 --image-size=32 --batch-size=32 --steps=20
          --warmup=5 --no-eval --progress=off --oversubscribe)
source "$ROOT/tests/e2e/lib/netns_pair.sh"
trap remove_pair EXIT
make_pair hb 10.215.1
shape() { shape_pair "$1"; }
one() {  # rate entry flags...
  local rate="$1" entry="$2"; shift 2
  local pids=() r ns dev
  for r in 0 1 2 3; do
    if ((r < 2)); then ns=$NA; dev=$VA; else ns=$NB; dev=$VB; fi
    timeout -k 5 600 ip netns exec "$ns" env RANK=$r LOCAL_RANK=$((r % 2)) WORLD_SIZE=4 LOCAL_WORLD_SIZE=2 \
      MASTER_ADDR=$ADDR_A MASTER_PORT=29500 GLOO_SOCKET_IFNAME="$dev" OMP_NUM_THREADS=1 \
      "$BIN" "${WORKLOAD[@]}" "$@" --run-id="mesh-2x2-$rate" --entry="$entry" --out="$OUT" > /dev/null 2>&1 &
    pids+=($!)
  done
  for r in "${pids[@]}"; do wait "$r" || echo "failed: $rate $entry (rank exit $?)" >&2; done
}
entries=("zero3:--strategy=zero3" "hsdp:--strategy=zero3 --replicate-degree=2" "ddp:--strategy=ddp"
         "hsdp-shm:--strategy=zero3 --replicate-degree=2 --cpu-backend=auto"
         "pp:--strategy=pmp --stage-ranks --chunks=8 --schedule=1f1b"
         "pp-dp:--strategy=pmp --stage-ranks --replicate-degree=2 --chunks=8 --schedule=1f1b")
if [[ -n ${ONLY:-} ]]; then  # ONLY="hsdp pp-dp": those entries alone
  kept=(); for e in "${entries[@]}"; do [[ " $ONLY " == *" ${e%%:*} "* ]] && kept+=("$e"); done; entries=("${kept[@]}")
fi
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
err = collections.defaultdict(list)  # the projection's error on each run: expected / measured - 1
for r in csv.DictReader(open(sys.argv[1])):
    if r["run_id"].startswith("mesh-2x2-"):
        by[(r["run_id"][9:], r["entry"])].append(float(r["throughput_img_s"]))
        if r.get("expected_img_s"):
            err[r["entry"]].append(float(r["expected_img_s"]) / float(r["throughput_img_s"]) - 1)
for rate in sorted({k[0] for k in by}):
    med = {e: statistics.median(v) for (rr, e), v in by.items() if rr == rate}
    print(rate, {e: f"{m:.1f}" for e, m in sorted(med.items())},
          *(f"{a}/{b} {med[a] / med[b]:.3f}" for a, b in (("hsdp", "zero3"), ("pp-dp", "pp"), ("hsdp-shm", "hsdp")) if a in med and b in med))
for e, v in sorted(err.items()):
    a = sorted(abs(x) for x in v)
    print(f"projection error {e}: median |error| {100 * statistics.median(a):.1f}%, largest {100 * a[-1]:.1f}% "
          f"over {len(a)} runs (expected_img_s from a profile measured after each run on its own ranks)")
PY
