#!/usr/bin/env bash
# ddpbench's data-parallel and sharded strategies (ddp, zero1, zero2, zero3 on
# 2 CPU ranks, and single on 1 device for the scaling baseline) against what
# PyTorch users run instead (research/rigs/torch_sharded.py: DDP, DDP +
# ZeroRedundancyOptimizer, FSDP2 without and with reshard after forward), in
# interleaved rounds: each round runs all thirteen once (ddp on both sides also
# with its gradients as views into the buckets; the lockstep ceiling below),
# the order reversed every other round, so a slow minute on a shared machine
# hits every entry alike.
#
#   research/rigs/strategies_vs_torch.sh OUT.csv [ROUNDS=5]
#
# Workload: ResNet-18, 64 px, batch 16 per rank, CPU, 1 intra-op thread per
# rank, synthetic data with 1000 classes, SGD lr 0.1 momentum 0.9, STEPS timed
# steps (default 20) after WARMUP untimed ones (default 5). Env: BIN (default
# build/ddpbench), PY (default .venv/bin/python), STEPS, WARMUP, MALLOC (reuse,
# the default: ddpbench's --cpu-malloc=reuse and PyTorch under the same glibc
# malloc settings, as research/rigs/compare_pytorch.sh does; or system),
# FLAGS (extra ddpbench flags for the 2-rank strategies, e.g.
# FLAGS="--cpu-backend=shm --overlap-optimizer"; recorded in each row's command),
# ONLY (a subset of the entries, e.g. ONLY="ddpbench:single ddpbench:ddp torch:ddp";
# the ratios missing an entry print n/a).
#
# Appends one row per successful run to OUT.csv: timestamp, host, git_sha,
# round, side (ddpbench|torch), config, img_s, command. A failed run prints
# `failed: ...` on stderr (with the tail of its output), adds no row, and the
# rig goes on (exiting 1 at the end, after the summary). At the end it prints
# each entry's median img/s over the rounds and the ratios, each two ways: the
# ratio of the two medians, and the median of the per-round ratios (over the
# rounds where both ran). Smoke test: STEPS=3 WARMUP=1 ... OUT.csv 1
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
[[ $# -ge 1 && $# -le 2 ]] || { echo "usage: $0 OUT.csv [ROUNDS=5]" >&2; exit 2; }
OUT="$1"; ROUNDS="${2:-5}"
[[ $ROUNDS =~ ^[1-9][0-9]*$ ]] || { echo "$0: ROUNDS=$ROUNDS: want a whole number >= 1" >&2; exit 2; }
BIN="${BIN:-$ROOT/build/ddpbench}"
PY="${PY:-$ROOT/.venv/bin/python}"
STEPS="${STEPS:-20}"; WARMUP="${WARMUP:-5}"
[[ $STEPS =~ ^[1-9][0-9]*$ && $WARMUP =~ ^[0-9]+$ ]] || { echo "$0: STEPS=$STEPS WARMUP=$WARMUP: want whole numbers, STEPS >= 1" >&2; exit 2; }
MALLOC="${MALLOC:-reuse}"
case "$MALLOC" in
  reuse) TUNABLES="glibc.malloc.arena_max=1:glibc.malloc.mmap_threshold=33554432:glibc.malloc.trim_threshold=2147483647" ;;
  system) TUNABLES="${GLIBC_TUNABLES:-}" ;;
  *) echo "$0: MALLOC=$MALLOC: want reuse or system" >&2; exit 2 ;;
esac
[[ -x $BIN ]] || { echo "$0: BIN=$BIN: not an executable" >&2; exit 2; }
[[ -x $PY ]] || { echo "$0: PY=$PY: not an executable" >&2; exit 2; }

DDPBENCH=(--device=cpu --model=resnet18 --image-size=64 --batch-size=16 --threads-per-device=1
          --steps="$STEPS" --warmup="$WARMUP" --no-eval --progress=off --cpu-malloc="$MALLOC")
TORCH=(--model=resnet18 --image-size=64 --batch-size=16 --steps="$STEPS" --warmup="$WARMUP")
# side:config, in round 1's order
# The last two are the ceiling ddp's scaling is read against: PyTorch's single
# process, and two replicas in lockstep (a barrier after every step, nothing
# exchanged), each rank pinned to its own core as ddpbench's are: no
# data-parallel implementation scales better on this host.
ENTRIES=(ddpbench:single ddpbench:ddp ddpbench:ddp-bucket-view ddpbench:zero1 ddpbench:zero2 ddpbench:zero3
         torch:ddp torch:ddp-bucket-view torch:zero1 torch:fsdp2-noreshard torch:fsdp2
         torch:single torch:none-lockstep)
# Not run unless ONLY names it: the two replicas without the barrier.
EXTRA=(torch:none)
if [[ -n ${ONLY:-} ]]; then
  for e in $ONLY; do
    [[ " ${ENTRIES[*]} ${EXTRA[*]} " == *" $e "* ]] || { echo "$0: ONLY: $e: not an entry; entries: ${ENTRIES[*]} ${EXTRA[*]}" >&2; exit 2; }
  done
  read -r -a ENTRIES <<<"$ONLY"
fi

HOST="$(hostname)"
SHA="$(git -C "$ROOT" describe --always --dirty --abbrev=12 2>/dev/null || echo unknown)"
TMP="$(mktemp -d)"; trap 'rm -rf "$TMP"' EXIT
[[ -s $OUT ]] || echo "timestamp,host,git_sha,round,side,config,img_s,command" >"$OUT"
: >"$TMP/rows.csv"
FAILED=0

csv_quote() { local s="${1//\"/\"\"}"; printf '"%s"' "$s"; }

# run_entry ROUND SIDE CONFIG: one run; appends its row to OUT and this run's rows.
run_entry() {
  local r="$1" side="$2" config="$3" cmd img_s="" rc=0 argv
  if [[ $side == ddpbench ]]; then
    local gpus=2; [[ $config == single ]] && gpus=1
    argv=("$BIN" --strategy="${config%-bucket-view}" --gpus="$gpus" "${DDPBENCH[@]}")
    [[ $config == *-bucket-view ]] && argv+=(--gradient-as-bucket-view)
    # shellcheck disable=SC2206  # FLAGS is a list of words
    [[ $config != single && -n ${FLAGS:-} ]] && argv+=($FLAGS)
    cmd="${argv[*]}"  # as run, less the --out into this rig's scratch folder
    rm -f "$TMP/run.csv"
    "${argv[@]}" --out="$TMP/run.csv" >"$TMP/log" 2>&1 || rc=$?
    if [[ $rc -eq 0 ]]; then
      img_s="$("$PY" -c 'import csv,sys; print(list(csv.DictReader(open(sys.argv[1])))[-1]["throughput_img_s"])' \
                "$TMP/run.csv" 2>>"$TMP/log")" || rc=$?
    fi
  else
    # The ceilings pin each rank to its own core, as ddpbench pins its CPU ranks.
    local mode="$config" ceiling=()
    case "$config" in
      single) mode=none ceiling=(--ranks=1 --pin) ;;
      none*) ceiling=(--pin) ;;
    esac
    argv=("$PY" "$ROOT/research/rigs/torch_sharded.py" --mode="$mode" "${TORCH[@]}" "${ceiling[@]}")
    cmd="GLIBC_TUNABLES=$TUNABLES ${argv[*]}"
    GLIBC_TUNABLES="$TUNABLES" "${argv[@]}" >"$TMP/log" 2>&1 || rc=$?
    if [[ $rc -eq 0 ]]; then img_s="$(sed -n 's/.*img\/s=\([0-9.]*\)$/\1/p' "$TMP/log" | tail -1)"; fi
  fi
  if [[ $rc -ne 0 || ! ${img_s:-} =~ ^[0-9]+(\.[0-9]+)?$ ]]; then
    echo "failed: round $r $side $config (exit $rc): $cmd" >&2
    tail -5 "$TMP/log" | sed 's/^/  | /' >&2
    FAILED=$((FAILED + 1))
    return 0
  fi
  local row
  row="$(date -u +%Y-%m-%dT%H:%M:%SZ),$HOST,$SHA,$r,$side,$config,$img_s,$(csv_quote "$cmd")"
  echo "$row" >>"$OUT"
  echo "$row" >>"$TMP/rows.csv"
  printf 'round %s: %-8s %-16s %8s img/s\n' "$r" "$side" "$config" "$img_s"
}

for r in $(seq "$ROUNDS"); do
  if (( r % 2 == 1 )); then order=("${ENTRIES[@]}"); else order=(); for ((i = ${#ENTRIES[@]} - 1; i >= 0; i--)); do order+=("${ENTRIES[i]}"); done; fi
  for e in "${order[@]}"; do run_entry "$r" "${e%%:*}" "${e#*:}"; done
done

"$PY" - "$TMP/rows.csv" "$ROUNDS" "$STEPS" "$WARMUP" <<'PY'
import collections, csv, statistics, sys
path, rounds, steps, warmup = sys.argv[1], *sys.argv[2:]
fields = ["timestamp", "host", "git_sha", "round", "side", "config", "img_s", "command"]
by = collections.defaultdict(dict)  # "side:config" -> {round: img/s}
for row in csv.DictReader(open(path), fieldnames=fields):
    by[f"{row['side']}:{row['config']}"][int(row["round"])] = float(row["img_s"])
print(f"\nmedians over {rounds} round(s), {steps} timed steps after {warmup} warm-up, img/s (global):")
for key, vals in by.items():
    print(f"  {key:24s} {statistics.median(vals.values()):8.2f}   per round {[vals[r] for r in sorted(vals)]}")

def line(name, num, den, scale=1.0):
    a, b = by.get(num, {}), by.get(den, {})
    if not a or not b:
        print(f"  {name:34s} n/a (no successful {num if not a else den} run)")
        return
    of_medians = statistics.median(a.values()) / (scale * statistics.median(b.values()))
    both = sorted(set(a) & set(b))
    per_round = [a[r] / (scale * b[r]) for r in both]
    med = f"{statistics.median(per_round):.3f} over {len(both)} round(s)" if both else "n/a"
    print(f"  {name:34s} {of_medians:6.3f}   median of per-round ratios {med}")

print("ratios (ratio of the medians; then the median of per-round ratios):")
# Each side's DDP at its best in each round: with or without the gradients as bucket views.
for side in ("ddpbench", "torch"):
    plain, view = by.get(f"{side}:ddp", {}), by.get(f"{side}:ddp-bucket-view", {})
    if plain or view:
        by[f"{side}:ddp-best"] = {r: max(plain.get(r, 0), view.get(r, 0)) for r in set(plain) | set(view)}
line("ddp / torch-ddp", "ddpbench:ddp", "torch:ddp")
line("ddp-bucket-view / torch-same", "ddpbench:ddp-bucket-view", "torch:ddp-bucket-view")
line("ddp best / torch-ddp best", "ddpbench:ddp-best", "torch:ddp-best")
line("zero1 / torch-zero1", "ddpbench:zero1", "torch:zero1")
line("zero2 / torch-fsdp2-noreshard", "ddpbench:zero2", "torch:fsdp2-noreshard")
line("zero3 / torch-fsdp2", "ddpbench:zero3", "torch:fsdp2")
line("zero1 / ddp", "ddpbench:zero1", "ddpbench:ddp")
line("zero2 / ddp", "ddpbench:zero2", "ddpbench:ddp")
line("zero3 / ddp", "ddpbench:zero3", "ddpbench:ddp")
for stage in (1, 2, 3):
    line(f"zero{stage} / ddp best", f"ddpbench:zero{stage}", "ddpbench:ddp-best")
line("ddp scaling eff. = ddp/(2 x single)", "ddpbench:ddp", "ddpbench:single", scale=2.0)
line("ddp-bucket-view scaling eff.", "ddpbench:ddp-bucket-view", "ddpbench:single", scale=2.0)
line("torch-ddp scaling eff.", "torch:ddp", "torch:single", scale=2.0)
line("two torch singles at once / 2x one", "torch:none", "torch:single", scale=2.0)
line("lockstep ceiling = lockstep / 2x one", "torch:none-lockstep", "torch:single", scale=2.0)
line("ddp / lockstep (share of the ceiling)", "ddpbench:ddp", "torch:none-lockstep")
PY
if (( FAILED > 0 )); then echo "$0: $FAILED run(s) failed (see 'failed:' above)" >&2; exit 1; fi
