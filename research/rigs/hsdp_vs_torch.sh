#!/usr/bin/env bash
# ddpbench's HSDP (zero3 --replicate-degree=2: parameters sharded within groups
# of 2 consecutive ranks, ranks 0-1 and 2-3, each reduced gradient shard
# all-reduced across the 2 groups) against PyTorch's (research/rigs/
# torch_sharded.py --mode=hsdp: FSDP2 fully_shard on a (replicate=2, shard=2)
# device mesh), with plain zero3 / FSDP2 and ddp / DDP on each side for
# reference, in interleaved rounds: each round runs all six once, the order
# reversed every other round, so a slow minute on a shared machine hits every
# entry alike.
#
#   research/rigs/hsdp_vs_torch.sh OUT.csv [ROUNDS=3]
#
# Entries, all on 4 CPU ranks of 1 intra-op thread each (ddpbench --gpus=4
# --oversubscribe --threads-per-device=1; torch --ranks=4): ddpbench zero3,
# ddpbench hsdp (zero3 --replicate-degree=2), ddpbench ddp; torch fsdp2, torch
# hsdp (--replicate=2), torch ddp. Workload: ResNet-18, 64 px, batch 16 per
# rank, synthetic data with 1000 classes, SGD lr 0.1 momentum 0.9, STEPS timed
# steps (default 20) after WARMUP untimed ones (default 5). Env: BIN (default
# build/ddpbench; it must have --replicate-degree, e.g. BIN=build-new/ddpbench),
# PY (default .venv/bin/python), STEPS, WARMUP, MALLOC (reuse, the default:
# ddpbench's --cpu-malloc=reuse and PyTorch under the same glibc malloc
# settings, as research/rigs/compare_pytorch.sh does; or system).
#
# Appends one row per successful run to OUT.csv: timestamp, host, git_sha,
# round, side (ddpbench|torch), config, img_s, peak_mem_mb, state_mb, command.
#
# state_mb IS the same measure on both sides: the model state rank 0 holds at
# rest after the last step (parameters, gradients, optimizer state; a sharded
# tensor by its local shard): ddpbench's row's param_mb + grad_mb +
# optimizer_state_mb for rank 0, torch_sharded.py's state_mb=.
#
# peak_mem_mb IS NOT THE SAME MEASURE ON THE TWO SIDES. ddpbench: its row's
# peak_mem_mb, the largest over the 4 logical devices of the peak of tensor
# bytes ddpbench's CPU allocator tracks for that device (its per-device
# figures, mem_per_device_mb, are printed as each run ends, not stored here).
# torch: rank 0's peak resident set size (getrusage ru_maxrss / 1024, printed
# by torch_sharded.py as peak_rss_mb=): the whole process, Python, torch's
# libraries and allocator slack included. Compare memory within a side (hsdp
# against zero3/fsdp2 against ddp), never ddpbench's against torch's.
#
# A failed run prints `failed: ...` on stderr (with the tail of its output),
# adds no row, and the rig goes on (exiting 1 at the end, after the summary).
# At the end it prints each entry's median img/s and peak_mem_mb over the
# rounds and the ratios, each two ways: the ratio of the two medians, and the
# median of the per-round ratios (over the rounds where both ran). Smoke test:
# BIN=build-new/ddpbench STEPS=2 WARMUP=1 ... OUT.csv 1
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
[[ $# -ge 1 && $# -le 2 ]] || { echo "usage: $0 OUT.csv [ROUNDS=3]" >&2; exit 2; }
OUT="$1"; ROUNDS="${2:-3}"
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
[[ "$("$BIN" --help 2>&1 || true)" == *--replicate-degree* ]] ||
  { echo "$0: BIN=$BIN has no --replicate-degree (HSDP); point BIN at a build that has it, e.g. BIN=build-new/ddpbench" >&2; exit 2; }

RANKS=4; REPLICATE=2
DDPBENCH=(--device=cpu --model=resnet18 --image-size=64 --batch-size=16 --gpus="$RANKS" --oversubscribe
          --threads-per-device=1 --steps="$STEPS" --warmup="$WARMUP" --no-eval --progress=off --cpu-malloc="$MALLOC")
TORCH=(--model=resnet18 --image-size=64 --batch-size=16 --ranks="$RANKS" --steps="$STEPS" --warmup="$WARMUP")
# side:config, in round 1's order
ENTRIES=(ddpbench:zero3 ddpbench:hsdp ddpbench:ddp torch:fsdp2 torch:hsdp torch:ddp)

HOST="$(hostname)"
SHA="$(git -C "$ROOT" describe --always --dirty --abbrev=12 2>/dev/null || echo unknown)"
TMP="$(mktemp -d)"; trap 'rm -rf "$TMP"' EXIT
[[ -s $OUT ]] || echo "timestamp,host,git_sha,round,side,config,img_s,peak_mem_mb,state_mb,command" >"$OUT"
: >"$TMP/rows.csv"
FAILED=0

csv_quote() { local s="${1//\"/\"\"}"; printf '"%s"' "$s"; }

# run_entry ROUND SIDE CONFIG: one run; appends its row to OUT and this run's rows.
run_entry() {
  local r="$1" side="$2" config="$3" cmd img_s="" mem="" state="" per_device="" rc=0 argv figures
  if [[ $side == ddpbench ]]; then
    case "$config" in
      hsdp) argv=("$BIN" --strategy=zero3 --replicate-degree="$REPLICATE" "${DDPBENCH[@]}") ;;
      *) argv=("$BIN" --strategy="$config" "${DDPBENCH[@]}") ;;
    esac
    cmd="${argv[*]}"  # as run, less the --out into this rig's scratch folder
    rm -f "$TMP/run.csv"
    "${argv[@]}" --out="$TMP/run.csv" >"$TMP/log" 2>&1 || rc=$?
    if [[ $rc -eq 0 ]]; then
      figures="$("$PY" -c 'import csv,sys; r=list(csv.DictReader(open(sys.argv[1])))[-1]; first=lambda k: float(r[k].split("/")[0]); print(r["throughput_img_s"], r["peak_mem_mb"], "%.2f" % (first("param_mb") + first("grad_mb") + first("optimizer_state_mb")), r["mem_per_device_mb"])' \
                 "$TMP/run.csv" 2>>"$TMP/log")" || rc=$?
      read -r img_s mem state per_device <<<"$figures" || true
    fi
  else
    argv=("$PY" "$ROOT/research/rigs/torch_sharded.py" --mode="$config" "${TORCH[@]}")
    [[ $config == hsdp ]] && argv+=(--replicate="$REPLICATE")
    cmd="GLIBC_TUNABLES=$TUNABLES ${argv[*]}"
    GLIBC_TUNABLES="$TUNABLES" "${argv[@]}" >"$TMP/log" 2>&1 || rc=$?
    if [[ $rc -eq 0 ]]; then
      img_s="$(sed -n 's/.*img\/s=\([0-9.]*\)$/\1/p' "$TMP/log" | tail -1)"
      mem="$(sed -n 's/.*peak_rss_mb=\([0-9.]*\) .*/\1/p' "$TMP/log" | tail -1)"
      state="$(sed -n 's/.*state_mb=\([0-9.]*\)$/\1/p' "$TMP/log" | tail -1)"
      per_device="rank 0 RSS"
    fi
  fi
  if [[ $rc -ne 0 || ! ${img_s:-} =~ ^[0-9]+(\.[0-9]+)?$ || ! ${mem:-} =~ ^[0-9]+(\.[0-9]+)?$ ||
        ! ${state:-} =~ ^[0-9]+(\.[0-9]+)?$ ]]; then
    echo "failed: round $r $side $config (exit $rc): $cmd" >&2
    tail -5 "$TMP/log" | sed 's/^/  | /' >&2
    FAILED=$((FAILED + 1))
    return 0
  fi
  local row
  row="$(date -u +%Y-%m-%dT%H:%M:%SZ),$HOST,$SHA,$r,$side,$config,$img_s,$mem,$state,$(csv_quote "$cmd")"
  echo "$row" >>"$OUT"
  echo "$row" >>"$TMP/rows.csv"
  printf 'round %s: %-8s %-6s %8s img/s  peak_mem_mb %8s (%s)  state_mb %s\n' "$r" "$side" "$config" "$img_s" "$mem" \
    "$per_device" "$state"
}

for r in $(seq "$ROUNDS"); do
  if (( r % 2 == 1 )); then order=("${ENTRIES[@]}"); else order=(); for ((i = ${#ENTRIES[@]} - 1; i >= 0; i--)); do order+=("${ENTRIES[i]}"); done; fi
  for e in "${order[@]}"; do run_entry "$r" "${e%%:*}" "${e#*:}"; done
done

"$PY" - "$TMP/rows.csv" "$ROUNDS" "$STEPS" "$WARMUP" <<'PY'
import collections, csv, statistics, sys
path, rounds, steps, warmup = sys.argv[1], *sys.argv[2:]
fields = ["timestamp", "host", "git_sha", "round", "side", "config", "img_s", "peak_mem_mb", "state_mb", "command"]
by = collections.defaultdict(dict)   # "side:config" -> {round: img/s}
mem = collections.defaultdict(dict)  # "side:config" -> {round: peak_mem_mb}
state = collections.defaultdict(dict)  # "side:config" -> {round: state_mb}
for row in csv.DictReader(open(path), fieldnames=fields):
    key, r = f"{row['side']}:{row['config']}", int(row["round"])
    by[key][r] = float(row["img_s"])
    mem[key][r] = float(row["peak_mem_mb"])
    state[key][r] = float(row["state_mb"])
print(f"\nmedians over {rounds} round(s), {steps} timed steps after {warmup} warm-up, 4 CPU ranks x 1 thread:")
print(f"  {'entry':16s} {'img/s':>8s} {'peak MB':>8s} {'state MB':>8s}   (peak MB: ddpbench max tracked tensor MB per"
      " device; torch rank 0 peak RSS: not comparable; state MB: rank 0's model state at rest, the same measure)")
for key, vals in by.items():
    print(f"  {key:16s} {statistics.median(vals.values()):8.2f} {statistics.median(mem[key].values()):8.1f}"
          f" {statistics.median(state[key].values()):8.2f}   img/s per round {[vals[r] for r in sorted(vals)]}")

def line(name, num, den):
    a, b = by.get(num, {}), by.get(den, {})
    if not a or not b:
        print(f"  {name:34s} n/a (no successful {num if not a else den} run)")
        return
    of_medians = statistics.median(a.values()) / statistics.median(b.values())
    both = sorted(set(a) & set(b))
    per_round = [a[r] / b[r] for r in both]
    med = f"{statistics.median(per_round):.3f} over {len(both)} round(s)" if both else "n/a"
    print(f"  {name:34s} {of_medians:6.3f}   median of per-round ratios {med}")

print("img/s ratios (ratio of the medians; then the median of per-round ratios):")
line("ddpbench hsdp / torch hsdp", "ddpbench:hsdp", "torch:hsdp")
line("ddpbench zero3 / torch fsdp2", "ddpbench:zero3", "torch:fsdp2")
line("ddpbench hsdp / ddpbench zero3", "ddpbench:hsdp", "ddpbench:zero3")
print("model state at rest on rank 0 (state MB), ratio of the medians:")
for num, den in (("ddpbench:hsdp", "torch:hsdp"), ("ddpbench:zero3", "torch:fsdp2"), ("ddpbench:ddp", "torch:ddp")):
    if state.get(num) and state.get(den):
        print(f"  {num} / {den}: {statistics.median(state[num].values()) / statistics.median(state[den].values()):.3f}")
PY
if (( FAILED > 0 )); then echo "$0: $FAILED run(s) failed (see 'failed:' above)" >&2; exit 1; fi
