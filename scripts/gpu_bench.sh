#!/usr/bin/env bash
# The GPU figures (speed, pipelines, projection, fusion), for a machine with CUDA (build first with
# scripts/gpu_build.sh). Parts, each appending to OUT_DIR (default results/):
#   parity   every strategy and pipeline schedule, and --cuda-graphs, with
#            --verify (float64 against single)          -> gpu-parity.csv
#   compare  ddpbench against PyTorch eager channels_last (research/rigs/pytorch_eager.py)
#            on the speed workloads, interleaved rounds; ddp world 1 against
#            single, PyTorch DDP world 1 against PyTorch eager (compare-ddp:
#            only these)                                 -> gpu-compare.csv
#            (one line per run) and gpu-compare-rows.csv (ddpbench's rows)
#   matrix   every strategy on ResNet-50 and ResNet-18 at AMPS (default bf16)
#                                                         -> gpu-matrix.csv
#   expected the projection: --calibrate a ResNet-50 profile (bf16,
#            batch 128, 2 oversubscribed ranks over Gloo), then ddp on 1 GPU
#            and ddp/zero1/2/3 on 2 ranks, each with its own --expected=auto
#            figure, and ddp with the profile    -> gpu-profile-resnet50-b128-bf16.json,
#                                                   gpu-expected.csv
#   fuse     --fuse=bn-add-relu: ddpbench single eager, graphs, fused, fused +
#            graphs against PyTorch eager channels_last and (the first
#            COMPILE_ROUNDS rounds, default 1) torch.compile, interleaved, on
#            ResNet-50 and ResNet-18 (bf16, batch 256) -> gpu-fuse.csv
#   fuse-parity  fused against unfused after 20 float32 steps, beside unfused
#            against itself (research/rigs/fuse_parity.py)   -> gpu-fuse-parity.csv
#   graphs-parity  float64 --verify of --fuse and --cuda-graphs (single)
#                                                         -> gpu-graphs-parity.csv
#   ddp-graphs  ddp world 1 with --cuda-graphs:
#            float64 --verify first, then interleaved rounds against single
#            (eager and graphs)                          -> gpu-ddp-graphs.csv
#   profile  --profile of ResNet-50 bf16 b256: eager, fused, fused + graphs,
#            each broken down by scripts/profile_breakdown.py
#                                                         -> gpu-profile-breakdown.csv
#   memory   memory_vs_expected against the caching allocator's peak: single,
#            ddp/zero1/zero2/zero3 at world 1, recompute none, all and auto
#            (ResNet-50 bf16 batch 64), and one --memory-snapshot that
#            Python's pickle must load with segments and device_traces
#                                                         -> gpu-memory.csv, memory-snapshot.pickle
#   conv-bn  --fuse=conv-bn: float64 --verify, then interleaved rounds against
#            eager and bn-add-relu (ResNet-50 bf16 b256) -> gpu-conv-bn.csv
#   decode   --decode=gpu (nvJPEG) against the CPU pool (--decode=cpu) and
#            synthetic data: ResNet-50 bf16 batch 256 on an ImageFolder of
#            ImageNet-sized JPEGs (333-500 px, scripts/make_imagefolder.py,
#            made once into DECODE_DATA, default OUT_DIR/imagefolder-333-500),
#            interleaved rounds                          -> gpu-decode.csv
#   scripts/gpu_bench.sh [OUT_DIR [PART...]]   (env: ROUNDS=3, AMPS=bf16,
#   MODELS="resnet50 resnet18", BIN, PY=python3); compare's rounds continue the numbering
#   already in gpu-compare.csv
# On a 1-GPU machine the multi-device strategies run 2 oversubscribed ranks or
# stages (the row says oversubscribed=true).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"; cd "$ROOT"
OUT_DIR="${1:-results}"; shift || true
PARTS=("${@:-parity compare matrix}"); PARTS=(${PARTS[*]})
ROUNDS="${ROUNDS:-3}"; AMPS="${AMPS:-bf16}"; MODELS="${MODELS:-resnet50 resnet18}"
BIN="${BIN:-$ROOT/build-gpu/ddpbench}"; PY="${PY:-python3}"
for p in "${PARTS[@]}"; do
  case "$p" in parity|compare|compare-ddp|matrix|expected|fuse|fuse-parity|graphs-parity|ddp-graphs|profile|memory|conv-bn|decode) ;;
    *) echo "gpu_bench.sh: part '$p': want parity, compare, compare-ddp, matrix, expected, fuse, fuse-parity, graphs-parity, ddp-graphs, profile, memory, conv-bn or decode" >&2; exit 2 ;;
  esac
done
[[ "$ROUNDS" =~ ^[1-9][0-9]*$ ]] || { echo "gpu_bench.sh: ROUNDS=$ROUNDS: want a whole number >= 1" >&2; exit 2; }
[[ -x "$BIN" ]] || { echo "gpu_bench.sh: $BIN is missing; run scripts/gpu_build.sh build first" >&2; exit 2; }
export LD_LIBRARY_PATH="$ROOT/.deb/root/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
NGPU="$("$PY" -c 'import torch; print(torch.cuda.device_count())' 2>/dev/null || echo 0)"
(( NGPU >= 1 )) || { echo "gpu_bench.sh: no CUDA device visible (to $PY's torch)" >&2; exit 2; }
MULTI=(--gpus=$(( NGPU >= 2 ? NGPU : 2 ))); (( NGPU >= 2 )) || MULTI+=(--oversubscribe)
mkdir -p "$OUT_DIR"
run() { echo "+ ddpbench $*"; "$BIN" --device=cuda --progress=off "$@" 2>&1 | grep -v '^\[W' | tail -2 ||
  echo "FAILED: $*"; }

parity() {
  local v=(--verify --model=resnet18 --image-size=32 --batch-size=16 --steps=4 --warmup=1 --out="$OUT_DIR/gpu-parity.csv")
  # SGD: every strategy and schedule; Adam: the ones with their own optimizer path.
  run --strategy=single "${v[@]}"
  run --strategy=single --cuda-graphs "${v[@]}"
  for s in dp ddp mp zero1 zero2 zero3; do run --strategy=$s "${MULTI[@]}" "${v[@]}"; done
  for sch in gpipe 1f1b zero-bubble; do run --strategy=pmp "${MULTI[@]}" --schedule=$sch --chunks=4 "${v[@]}"; done
  for sch in interleaved interleaved-zero-bubble; do
    run --strategy=pmp "${MULTI[@]}" --schedule=$sch --chunks=4 --virtual-stages=2 "${v[@]}"
  done
  run --strategy=single --optimizer=adam "${v[@]}"
  run --strategy=single --cuda-graphs --optimizer=adam "${v[@]}"
  for s in ddp zero1; do run --strategy=$s "${MULTI[@]}" --optimizer=adam "${v[@]}"; done
  run --strategy=ddp --gpus=1 "${v[@]}"
}

# One timed run of a named case; appends "round,name,img/s,command" to $CSV
# (default gpu-compare.csv; ddpbench's rows to ${CSV%.csv}-rows.csv).
compare_one() {
  local round="$1" name="$2"; shift 2
  local csv="${CSV:-$OUT_DIR/gpu-compare.csv}" rows="${CSV:+${CSV%.csv}-rows.csv}"; rows="${rows:-$OUT_DIR/gpu-compare-rows.csv}"
  local line ips
  if [[ "$1" == pytorch ]]; then
    shift; line="$("$PY" research/rigs/pytorch_eager.py --device=cuda "$@" 2>&1 | tail -1)"; ips="${line##*img/s=}"
    [[ "$line" == *img/s=* ]] || { echo "  pytorch failed: $line"; ips=nan; }
    set -- "$PY" research/rigs/pytorch_eager.py --device=cuda "$@"
  else
    "$BIN" --device=cuda --progress=off --run-id="gpu-compare-r$round" --entry="$name" \
      --out="$rows" "$@" > "$OUT_DIR/last-run.log" 2>&1 || { echo "  ddpbench failed:"; tail -3 "$OUT_DIR/last-run.log"; }
    ips="$("$PY" -c 'import csv,sys; r=[x for x in csv.DictReader(open(sys.argv[1])) if x["run_id"]==sys.argv[2] and x["entry"]==sys.argv[3]] if __import__("os").path.exists(sys.argv[1]) else []; print(r[-1]["throughput_img_s"] if r else "nan")' \
      "$rows" "gpu-compare-r$round" "$name")"
    set -- ddpbench --device=cuda "$@"
  fi
  echo "round $round $name: $ips img/s"
  [[ -f "$csv" ]] || echo "timestamp,host,round,name,img_s,command" > "$csv"
  echo "$(date -u +%FT%TZ),$(hostname),$round,$name,$ips,\"$*\"" >> "$csv"
}

# The next round number of a compare-style CSV: one past its highest (1 when
# it has none, or does not exist yet).
next_round() {
  local last=0
  [[ -f "$1" ]] && last="$(tail -n +2 "$1" | cut -d, -f3 | sort -n | tail -1)"
  echo $(( ${last:-0} + 1 ))
}

# Medians per name and the ratios of named pairs (rounds matched) of a
# compare-style CSV: ratios FILE A/B ...
ratios() {
  "$PY" - "$@" <<'PY'
import collections, csv, math, statistics, sys
by = collections.defaultdict(dict)
for r in csv.DictReader(open(sys.argv[1])):
    if r["img_s"] not in ("nan", ""):
        by[r["name"]][r["round"]] = float(r["img_s"])
for n, v in by.items():
    print(f"{n:34s} median {statistics.median(v.values()):9.1f} img/s over {len(v)} rounds")
for pair in sys.argv[2:]:
    a, b = pair.split("/")
    rs = [by[a][k] / by[b][k] for k in by.get(a, {}) if k in by.get(b, {})]
    print(f"{a} / {b}: " + (f"{statistics.median(rs):.3f} (rounds: {', '.join(f'{x:.3f}' for x in rs)})" if rs else "n/a"))
PY
}

W=(--image-size=224 --amp=bf16 --steps="${STEPS:-40}" --warmup="${WARMUP:-15}")
# ddpbench single (eager, then --cuda-graphs) against PyTorch eager.
compare_single_round() {
  local r="$1" m
  for m in "resnet50 256" "resnet18 256" "resnet18 64"; do
    set -- $m
    compare_one "$r" "ddpbench-$1-b$2" --strategy=single --model=$1 --batch-size=$2 "${W[@]}"
    compare_one "$r" "ddpbench-graphs-$1-b$2" --strategy=single --cuda-graphs --model=$1 --batch-size=$2 "${W[@]}"
    compare_one "$r" "pytorch-$1-b$2" pytorch --model=$1 --batch-size=$2 "${W[@]}" --memory-format=channels_last
  done
}
# ddp on one GPU against single, and PyTorch's DDP (world 1) against PyTorch eager.
compare_ddp_round() {
  local r="$1" b=(--model=resnet50 --batch-size=128)
  compare_one "$r" "single-resnet50-b128" --strategy=single "${b[@]}" "${W[@]}"
  compare_one "$r" "ddp1-resnet50-b128" --strategy=ddp --gpus=1 "${b[@]}" "${W[@]}"
  compare_one "$r" "pytorch-resnet50-b128" pytorch "${b[@]}" "${W[@]}" --memory-format=channels_last
  compare_one "$r" "pytorch-ddp1-resnet50-b128" pytorch --ddp "${b[@]}" "${W[@]}" --memory-format=channels_last
}

compare() {
  [[ -f "$OUT_DIR/gpu-compare.csv" ]] || echo "timestamp,host,round,name,img_s,command" > "$OUT_DIR/gpu-compare.csv"
  local r first; first="$(next_round "$OUT_DIR/gpu-compare.csv")"
  for r in $(seq "$first" $(( first + ROUNDS - 1 ))); do
    [[ "${1:-}" == ddp ]] || compare_single_round "$r"
    compare_ddp_round "$r"
  done
  "$PY" - "$OUT_DIR/gpu-compare.csv" <<'PY'
import collections, csv, statistics, sys
by = collections.defaultdict(dict)
for r in csv.DictReader(open(sys.argv[1])):
    by[r["name"]][r["round"]] = float(r["img_s"])
def ratio(a, b):
    rs = [by[a][k] / by[b][k] for k in by[a] if k in by.get(b, {})]
    return f"{statistics.median(rs):.3f} (rounds: {', '.join(f'{x:.3f}' for x in rs)})" if rs else "n/a"
for n, v in by.items():
    print(f"{n:32s} median {statistics.median(v.values()):9.1f} img/s")
for m in ["resnet50-b256", "resnet18-b256", "resnet18-b64"]:
    print(f"{m}: ddpbench/pytorch {ratio('ddpbench-' + m, 'pytorch-' + m)}; with --cuda-graphs {ratio('ddpbench-graphs-' + m, 'pytorch-' + m)}")
print(f"ddp world 1 / single (resnet50 b128): {ratio('ddp1-resnet50-b128', 'single-resnet50-b128')}")
print(f"PyTorch DDP world 1 / PyTorch eager (resnet50 b128): {ratio('pytorch-ddp1-resnet50-b128', 'pytorch-resnet50-b128')}")
print(f"ddpbench ddp world 1 / PyTorch DDP world 1: {ratio('ddp1-resnet50-b128', 'pytorch-ddp1-resnet50-b128')}")
PY
}

matrix() {
  for model in $MODELS; do
    for amp in $AMPS; do
      local c=(--model="$model" --amp="$amp" --image-size=224 --batch-size=128 --steps=40 --warmup=15 --out="$OUT_DIR/gpu-matrix.csv")
      run --strategy=single "${c[@]}"
      run --strategy=single --cuda-graphs "${c[@]}"
      for s in dp ddp mp pmp zero1 zero2 zero3; do run --strategy="$s" "${MULTI[@]}" "${c[@]}"; done
    done
  done
}

expected() {
  local w=(--model=resnet50 --amp=bf16 --image-size=224 --batch-size=128)
  local c=("${w[@]}" --steps=40 --warmup=15 --no-eval --out="$OUT_DIR/gpu-expected.csv")
  local profile="$OUT_DIR/gpu-profile-resnet50-b128-bf16.json"
  run --calibrate="$profile" --strategy=ddp "${MULTI[@]}" "${w[@]}"
  run --strategy=ddp --gpus=1 "${c[@]}"
  for s in ddp zero1 zero2 zero3; do run --strategy=$s "${MULTI[@]}" "${c[@]}"; done
  [[ -f "$profile" ]] && run --strategy=ddp "${MULTI[@]}" --expected="$profile" "${c[@]}"
  "$PY" - "$OUT_DIR/gpu-expected.csv" <<'PY'
import csv, sys
for r in csv.DictReader(open(sys.argv[1])):
    print(f"{r['strategy']:6s} world {r['world_size']}: {r['throughput_img_s']:>9s} img/s, expected {r['expected_img_s']:>9s}"
          f" ({r['expected_from']}), vs_expected {r['vs_expected']}, largest term {r['expected_term']}")
PY
}

# --fuse=bn-add-relu and --cuda-graphs on single against PyTorch eager and
# torch.compile (the latter compiles in its warm-up: 25 steps there).
fuse() {
  local CSV="$OUT_DIR/gpu-fuse.csv" r m first; first="$(next_round "$CSV")"
  for r in $(seq "$first" $(( first + ROUNDS - 1 ))); do
    for m in ${FUSE_MODELS:-resnet50 resnet18}; do
      local c=(--strategy=single --model=$m --batch-size=256 "${W[@]}")
      CSV="$CSV" compare_one "$r" "eager-$m" "${c[@]}"
      CSV="$CSV" compare_one "$r" "fused-$m" "${c[@]}" --fuse=bn-add-relu
      [[ -n "${FUSE_NO_GRAPHS_ROW:-}" ]] || CSV="$CSV" compare_one "$r" "graphs-$m" "${c[@]}" --cuda-graphs
      CSV="$CSV" compare_one "$r" "fused-graphs-$m" "${c[@]}" --fuse=bn-add-relu --cuda-graphs
      CSV="$CSV" compare_one "$r" "pytorch-$m" pytorch --model=$m --batch-size=256 "${W[@]}" --memory-format=channels_last
      if (( r < first + ${COMPILE_ROUNDS:-1} )); then
        CSV="$CSV" compare_one "$r" "compile-$m" pytorch --compile --model=$m --batch-size=256 --image-size=224 \
          --amp=bf16 --steps=40 --warmup=25 --memory-format=channels_last
      fi
    done
  done
  local pairs=() m
  for m in ${FUSE_MODELS:-resnet50 resnet18}; do
    pairs+=("fused-$m/eager-$m" "fused-graphs-$m/pytorch-$m" "graphs-$m/pytorch-$m" "eager-$m/pytorch-$m"
            "fused-graphs-$m/compile-$m")
  done
  ratios "$CSV" "${pairs[@]}"
}

fuse_parity() {
  local out="$OUT_DIR/gpu-fuse-parity.csv"
  # A small learning rate and 10 classes: at lr 0.1 and 1000 classes this run
  # diverges (losses 12-33 after 20 steps on an H100), and two unfused runs
  # already end tens apart, which would hide any difference of the fusion.
  local w=(--model=resnet50 --image-size=64 --batch-size=32 --num-classes=10 --lr=0.01)
  "$PY" research/rigs/fuse_parity.py --binary="$BIN" --out="$out" -- "${w[@]}" --amp=off
  "$PY" research/rigs/fuse_parity.py --binary="$BIN" --out="$out" -- "${w[@]}" --amp=bf16
}

# float64 parity (--verify) of the fused node and of the replayed steps.
graphs_parity() {
  local v=(--verify --verify-steps=4 --model=resnet18 --image-size=32 --batch-size=16 --steps=4 --warmup=2
           --out="$OUT_DIR/gpu-graphs-parity.csv")
  run --strategy=single --fuse=bn-add-relu "${v[@]}"
  run --strategy=single --fuse=bn-add-relu --cuda-graphs "${v[@]}"
}

# ddp world 1 captured whole (its Reducer's NCCL all-reduces inside the
# graph): float64 parity first (past the 11 eager steps), then speed against
# single, both eager and captured, interleaved.
ddp_graphs() {
  local v=(--verify --verify-steps=14 --model=resnet18 --image-size=32 --batch-size=16 --steps=14 --warmup=0
           --out="$OUT_DIR/gpu-graphs-parity.csv")
  "$BIN" --device=cuda --progress=off --strategy=ddp --gpus=1 --cuda-graphs "${v[@]}" > "$OUT_DIR/ddp-graphs-verify.log" 2>&1 ||
    { echo "ddp-graphs: the captured ddp step failed:"; grep -v '^\[W' "$OUT_DIR/ddp-graphs-verify.log" | tail -4; return 0; }
  tail -2 "$OUT_DIR/ddp-graphs-verify.log"
  local CSV="$OUT_DIR/gpu-ddp-graphs.csv" r first b=(--model=resnet50 --batch-size=128)
  first="$(next_round "$CSV")"
  for r in $(seq "$first" $(( first + ROUNDS - 1 ))); do
    CSV="$CSV" compare_one "$r" "single-graphs-resnet50-b128" --strategy=single --cuda-graphs "${b[@]}" "${W[@]}"
    CSV="$CSV" compare_one "$r" "ddp1-graphs-resnet50-b128" --strategy=ddp --gpus=1 --cuda-graphs "${b[@]}" "${W[@]}"
    CSV="$CSV" compare_one "$r" "single-resnet50-b128" --strategy=single "${b[@]}" "${W[@]}"
    CSV="$CSV" compare_one "$r" "ddp1-resnet50-b128" --strategy=ddp --gpus=1 "${b[@]}" "${W[@]}"
  done
  ratios "$CSV" ddp1-graphs-resnet50-b128/single-graphs-resnet50-b128 ddp1-graphs-resnet50-b128/single-resnet50-b128 \
    ddp1-resnet50-b128/single-resnet50-b128
}

# Where one ResNet-50 step's device time goes (PyTorch's profiler over 5
# timed steps), before and after the fusion and the graph.
profile() {
  local out="$OUT_DIR/gpu-profile-breakdown.csv" v name
  local c=(--strategy=single --model=resnet50 --batch-size=256 --image-size=224 --amp=bf16 --steps=5 --warmup=15
           --no-eval --out="$OUT_DIR/gpu-profile-rows.csv")
  for v in "eager|" "fused|--fuse=bn-add-relu" "fused-graphs|--fuse=bn-add-relu --cuda-graphs"; do
    name="${v%%|*}"
    local json="$OUT_DIR/profile-resnet50-$name.json"
    # shellcheck disable=SC2086
    run "${c[@]}" ${v#*|} --profile="$json"
    [[ -f "$json" ]] || continue
    "$PY" scripts/profile_breakdown.py --format=csv --label="$name" "$json" > "$OUT_DIR/breakdown.tmp" || continue
    if [[ -f "$out" ]]; then tail -n +2 "$OUT_DIR/breakdown.tmp" >> "$out"; else cp "$OUT_DIR/breakdown.tmp" "$out"; fi
    "$PY" scripts/profile_breakdown.py --label="$name" "$json"
  done
  rm -f "$OUT_DIR/breakdown.tmp"
}

# The memory model against the caching allocator: each row's
# memory_vs_expected is its measured peak over memory_expected_mb.
memory() {
  local c=(--model=resnet50 --image-size=224 --batch-size=64 --amp=bf16 --steps=4 --warmup=2 --no-eval
           --out="$OUT_DIR/gpu-memory.csv") s r
  for s in single "ddp --gpus=1" "zero1 --gpus=1" "zero2 --gpus=1" "zero3 --gpus=1"; do
    for r in none all auto; do
      # shellcheck disable=SC2086
      run --strategy=$s --recompute=$r "${c[@]}"
    done
  done
  run --strategy=single "${c[@]}" --memory-snapshot="$OUT_DIR/memory-snapshot.pickle"
  "$PY" - "$OUT_DIR/memory-snapshot.pickle" "$OUT_DIR/gpu-memory.csv" <<'PYEOF' || echo "FAILED: memory snapshot check"
import csv, pickle, sys
snap = pickle.load(open(sys.argv[1], "rb"))
print("snapshot:", len(snap["segments"]), "segments,", sum(len(t) for t in snap["device_traces"]), "trace entries")
for r in csv.DictReader(open(sys.argv[2])):
    print(r["strategy"], r["recompute"], "memory_vs_expected", r.get("memory_vs_expected", ""))
PYEOF
}

conv_bn() {
  run --strategy=single --fuse=conv-bn --verify --model=resnet18 --image-size=32 --batch-size=16 --steps=4 --warmup=1 \
    --out="$OUT_DIR/gpu-conv-bn-parity.csv"
  local CSV="$OUT_DIR/gpu-conv-bn.csv" r first b=(--model=resnet50 --batch-size=256)
  first="$(next_round "$CSV")"
  for r in $(seq "$first" $(( first + ROUNDS - 1 ))); do
    CSV="$CSV" compare_one "$r" "eager-resnet50-b256" --strategy=single "${b[@]}" "${W[@]}"
    CSV="$CSV" compare_one "$r" "bn-add-relu-resnet50-b256" --strategy=single --fuse=bn-add-relu "${b[@]}" "${W[@]}"
    CSV="$CSV" compare_one "$r" "conv-bn-resnet50-b256" --strategy=single --fuse=conv-bn "${b[@]}" "${W[@]}"
  done
  ratios "$CSV" conv-bn-resnet50-b256/eager-resnet50-b256 conv-bn-resnet50-b256/bn-add-relu-resnet50-b256
}

# Input at the GPU's speed: each round trains on synthetic data, then on the
# JPEG folder decoded by nvJPEG, then by the CPU pool (rows appended as each
# run ends, so a part cut short keeps its finished rounds).
decode() {
  local data="${DECODE_DATA:-$OUT_DIR/imagefolder-333-500}" CSV="$OUT_DIR/gpu-decode.csv" r first
  local b=(--strategy=single --model=resnet50 --batch-size=256 "${W[@]}")
  local f=(--dataset=imagefolder --data-dir="$data")
  if [[ ! -d "$data/train" ]]; then
    "$PY" scripts/make_imagefolder.py --out="$data" --classes=100 --train-per-class=80 --val-per-class=2 \
      --min-size=333 --max-size=500 || { echo "FAILED: make_imagefolder.py --out=$data"; return; }
  fi
  first="$(next_round "$CSV")"
  for r in $(seq "$first" $(( first + ROUNDS - 1 ))); do
    CSV="$CSV" compare_one "$r" "synthetic-resnet50-b256" "${b[@]}"
    CSV="$CSV" compare_one "$r" "gpu-decode-resnet50-b256" "${b[@]}" "${f[@]}" --decode=gpu
    CSV="$CSV" compare_one "$r" "cpu-decode-resnet50-b256" "${b[@]}" "${f[@]}" --decode=cpu
  done
  ratios "$CSV" gpu-decode-resnet50-b256/synthetic-resnet50-b256 cpu-decode-resnet50-b256/synthetic-resnet50-b256 \
    gpu-decode-resnet50-b256/cpu-decode-resnet50-b256
}

for p in "${PARTS[@]}"; do
  case "$p" in compare-ddp) compare ddp ;; fuse-parity) fuse_parity ;; graphs-parity) graphs_parity ;;
    ddp-graphs) ddp_graphs ;; conv-bn) conv_bn ;; *) "$p" ;; esac
done
