#!/usr/bin/env bash
# The two-dimensional strategies on two hosts: 4 ranks, 2 in each of two
# network namespaces joined by a veth pair (tests/e2e/lib/netns_pair.sh),
# launched by the environment launcher with LOCAL_WORLD_SIZE=2, so that each
# group of --replicate-degree=2 is one namespace's ranks and only the
# replicate groups cross the pair. Each run matches the single-device run
# (float64 --verify), and the groups fall as designed, measured in bytes
# through the pair:
#  - HSDP (zero3 --replicate-degree=2, --cpu-backend=auto: each shard group
#    through shared memory, the replicate groups over Gloo): the all-gathers
#    and reduce-scatters stay inside a namespace, so fewer bytes cross than
#    plain zero3 sends;
#  - pipelines replicated (pmp --stage-ranks --replicate-degree=2): each
#    pipeline's hand-offs stay inside its namespace and only the stages'
#    gradient all-reduce crosses, far fewer bytes than when the same ranks
#    are placed with each pipeline straddling the pair (its activations and
#    gradients crossing instead); the trace holds every rank's replicate
#    all-reduces.
set -euo pipefail
BIN="$1"; SRC="$2"
TMP="$(mktemp -d)"
source "$SRC/tests/e2e/lib/launch_common.sh"
source "$SRC/tests/e2e/lib/netns_pair.sh"
clear_launcher_env
trap end_pair EXIT
make_pair msh "10.214.$(($$ % 250 + 1))"
sent() { pair_bytes "$1" "$2" tx; }

WORK=(--strategy=zero3 --device=cpu --small-input --width=16 --image-size=16 --batch-size=8 --steps=6 --warmup=1
      --progress=off --verify --oversubscribe --expected=off)
run_host() {  # namespace interface rank rank
  local r local=0
  for r in "$3" "$4"; do
    timeout -k 5 200 ip netns exec "$1" env RANK="$r" LOCAL_RANK=$((local++)) WORLD_SIZE=4 LOCAL_WORLD_SIZE=2 \
      MASTER_ADDR="$ADDR_A" MASTER_PORT=29500 GLOO_SOCKET_IFNAME="$2" "$BIN" "${WORK[@]}" "${EXTRA[@]}" \
      --out="$TMP/r.csv" >"$TMP/rank$r.log" 2>&1 &
    PIDS+=($!)
  done
}
# Bytes the pair carried (both ways) for one 4-rank run with EXTRA flags,
# ranks A0 A1 in the first namespace and the others in the second.
crossed() {  # [A0 A1 B0 B1]
  local a0 b0 rc pid place=("${@:-0}")
  ((${#place[@]} == 4)) || place=(0 1 2 3)
  a0="$(sent "$NA" "$VA")"; b0="$(sent "$NB" "$VB")"
  PIDS=()
  run_host "$NA" "$VA" "${place[0]}" "${place[1]}"
  run_host "$NB" "$VB" "${place[2]}" "${place[3]}"
  for pid in "${PIDS[@]}"; do
    wait_pid "$pid" 220 "rank"; rc=$RC
    [[ $rc -eq 0 ]] || fail "${EXTRA[*]}: a rank exited $rc: $(tail -n 20 "$TMP"/rank*.log)"
  done
  CROSSED=$(( $(sent "$NA" "$VA") - a0 + $(sent "$NB" "$VB") - b0 ))
}
EXTRA=(--replicate-degree=2 --cpu-backend=auto); crossed; HSDP=$CROSSED
grep -q "mesh: replicate=2,shard=2 (group ranks 2..3" "$TMP/rank3.log" || fail "rank 3's group: $(cat "$TMP/rank3.log")"
EXTRA=(); crossed; FLAT=$CROSSED
echo "bytes over the pair: zero3 with --replicate-degree=2 $HSDP, plain zero3 $FLAT"
"$PY" - "$TMP/r.csv" <<'PYEOF' || fail "the rows"
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1])))
assert len(rows) == 2, len(rows)
for r, mesh in zip(rows, ("replicate=2,shard=2", "")):
    assert (r["strategy"], r["launcher"], r["world_size"], r["parity_ok"], r["mesh"]) == ("zero3", "env", "4", "true", mesh), r
    assert float(r["parity_max_abs_diff"]) <= 1e-10, r["parity_max_abs_diff"]
print("rows ok: parity", [r["parity_max_abs_diff"] for r in rows])
PYEOF
# Plain zero3 gathers and reduce-scatters every unit across the pair; the
# mesh sends only the replicas' all-reduce of half the gradients over it
# (measured: 45% of plain zero3's bytes at this size, where the world
# group's buffer broadcasts and the parity check are a large share; byte
# counts do not depend on timing).
((HSDP > 0 && 10 * HSDP < 6 * FLAT)) || fail "the mesh's groups did not keep their collectives inside a host: $HSDP bytes crossed, plain zero3 $FLAT"

# Pipelines replicated: 2 stages split after layer2, whose output (8 channels
# at 32x32 an image, 16 images a step) outweighs the model's gradients.
rm -f "$TMP/r.csv"
WORK=(--strategy=pmp --stage-ranks --replicate-degree=2 --device=cpu --small-input --width=4 --image-size=64
      --batch-size=16 --chunks=4 --schedule=1f1b --split=5,5 --steps=4 --warmup=1 --no-eval --progress=off --verify
      --oversubscribe --expected=off --cpu-backend=gloo)
# (Gloo throughout: the namespaces share one /dev/shm, so shared memory would
# carry a straddling pipeline's hand-offs past the pair and hide what crosses.)
EXTRA=(--trace="$TMP/pp.json"); crossed 0 1 2 3; DESIGNED=$CROSSED
grep -q "mesh: pp=2,dp=2 (group ranks 2..3" "$TMP/rank3.log" || fail "rank 3's pipeline: $(cat "$TMP/rank3.log")"
EXTRA=(); crossed 0 2 1 3; STRADDLED=$CROSSED
echo "bytes over the pair: pipelines inside a namespace $DESIGNED, straddling the pair $STRADDLED"
"$PY" - "$TMP/r.csv" "$TMP/pp.json" <<'PYEOF' || fail "the pp x dp rows or trace"
import csv, json, sys
rows = list(csv.DictReader(open(sys.argv[1])))
assert len(rows) == 2, len(rows)
for r in rows:
    assert (r["strategy"], r["world_size"], r["parity_ok"], r["mesh"]) == ("pmp", "4", "true", "pp=2,dp=2"), r
    assert float(r["parity_max_abs_diff"]) <= 1e-10, r["parity_max_abs_diff"]
events = json.load(open(sys.argv[2]))
events = events["traceEvents"] if isinstance(events, dict) else events
ranks = {e["pid"] for e in events if e.get("name") == "replicate all-reduce"}
assert ranks == {0, 1, 2, 3}, f"replicate all-reduces traced on ranks {sorted(ranks)}"
print("pp x dp rows ok: parity", [r["parity_max_abs_diff"] for r in rows], "; replicate all-reduces on every rank")
PYEOF
# Straddling, every micro-batch's activation and gradient crosses; designed,
# only the stages' gradient all-reduces (and the set-up's and the parity
# check's world-group traffic) do: measured 8.8 MB against 23.8 MB (byte
# counts do not depend on timing).
((DESIGNED > 0 && 2 * DESIGNED < STRADDLED)) || fail "the pipelines' hand-offs did not stay inside a host: $DESIGNED bytes crossed, $STRADDLED with the pipelines straddling the pair"
echo "mesh_two_hosts: all checks passed"
