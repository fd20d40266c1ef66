#!/usr/bin/env bash
# The speed flags through the real binary on CPU: the row says how the step
# ran (memory format, optimizer kernels, host malloc, FLOPs per image; CUDA-only columns
# empty), and every bad value is one clear error, exit 2, no row.
set -euo pipefail
BIN="$1"; SRC="$2"
TMP="$(mktemp -d)"; trap 'rm -rf "$TMP"' EXIT
PY="$SRC/.venv/bin/python"; [[ -x "$PY" ]] || PY=python3
fail() { echo "FAIL: $*"; exit 1; }
source "$SRC/tests/e2e/lib/bad_input.sh"
COMMON=(--device=cpu --model=resnet18 --small-input --width=8 --image-size=16 --batch-size=4 --warmup=1)

"$BIN" --strategy=single "${COMMON[@]}" --steps=3 --out="$TMP/r.csv"
"$BIN" --strategy=single "${COMMON[@]}" --steps=3 --memory-format=channels_last --optimizer-impl=foreach \
  --optimizer=adam --out="$TMP/r.csv"
# --fuse=conv-bn runs its unfused stages on CPU; --verify checks them in
# float64 against torchvision's maths (the reference is never fused).
"$BIN" --strategy=single "${COMMON[@]}" --steps=3 --optimizer-impl=fused --cpu-malloc=system --fuse=conv-bn \
  --verify --verify-steps=2 --out="$TMP/r.csv"
"$PY" - "$TMP/r.csv" <<'PYEOF'
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1])))
assert len(rows) == 3, rows
default, cl, fused = rows
assert default["memory_format"] == "contiguous" and default["optimizer_impl"] == "per-param", default
assert cl["memory_format"] == "channels_last" and cl["optimizer_impl"] == "foreach", cl
assert fused["optimizer_impl"] == "fused", fused
assert default["fuse"] == "off" and fused["fuse"].startswith("conv-bn (ATen stages"), fused["fuse"]
assert fused["parity_ok"] == "true" and "fuse=conv-bn" in fused["parity_model"], fused
assert float(fused["parity_max_abs_diff"]) < 1e-12, fused["parity_max_abs_diff"]
assert default["cpu_malloc"] == cl["cpu_malloc"] == "reuse" and fused["cpu_malloc"] == "system", rows
for r in rows:
    # ResNet-18 at width 8 (1/8 of 64), 16 px, small stem: a few MFLOPs per image, x3 for training.
    assert 1e-6 < float(r["model_tflops_per_img"]) < 1e-3, r["model_tflops_per_img"]
    for k in ["mfu", "tf32", "cudnn_benchmark", "cuda_graphs"]:  # CUDA only
        assert r[k] == "", (k, r[k])
    assert float(r["throughput_img_s"]) > 0 and float(r["step_ms_p50"]) > 0
print("rows ok")
PYEOF

# --repeat: one warm-up, three timed sections; the row has the median and spread.
"$BIN" --strategy=single "${COMMON[@]}" --steps=2 --repeat=3 --out="$TMP/rep.csv"
"$PY" - "$TMP/rep.csv" <<'PYEOF'
import csv, sys
r = list(csv.DictReader(open(sys.argv[1])))[0]
assert r["repeats"] == "3", r["repeats"]
lo, med, hi = (float(r[k]) for k in ["throughput_min_img_s", "throughput_img_s", "throughput_max_img_s"])
assert 0 < lo <= med <= hi and float(r["throughput_mad_img_s"]) >= 0, r
print("repeat ok:", lo, med, hi)
PYEOF

snapshot_results
bad_input single "--repeat=0: must be at least 1" --repeat=0
set +e; out="$("$BIN" --strategy=single "${COMMON[@]}" --repeat=2 --epochs=1 --out="$TMP/r.csv" 2>&1)"; rc=$?; set -e
[[ $rc -eq 2 ]] && grep -q "ddpbench: error: --repeat=2 with --epochs=1" <<<"$out" || fail "--repeat with --epochs: $rc $out"
unchanged "--repeat with --epochs"
bad_input single "--memory-format=nhwc: not accepted; accepted values: auto|channels_last|contiguous" --memory-format=nhwc
bad_input single "--tf32=maybe: not accepted; accepted values: on|off|all" --tf32=maybe
bad_input single "--optimizer-impl=turbo: not accepted" --optimizer-impl=turbo
bad_input single "--cuda-graphs: CUDA graphs need" --cuda-graphs
bad_input single "--cuda-graphs with --amp=fp16: the loss scaler decides on the host" --cuda-graphs --amp=fp16
bad_input single "--cuda-graphs with --optimizer-impl=foreach: only the fused kernels" --cuda-graphs --optimizer-impl=foreach
bad_input single "--fuse=magic: not accepted; accepted values: off|bn-add-relu|conv-bn" --fuse=magic
bad_input single "--fuse=bn-add-relu: the fusion runs in cuDNN, which needs --device=cuda" --fuse=bn-add-relu
bad_input single "--fuse=bn-add-relu with --norm=group: only BatchNorm is fused" --fuse=bn-add-relu --norm=group
bad_input single "--fuse=conv-bn with --norm=frozen-bn: only BatchNorm is fused" --fuse=conv-bn --norm=frozen-bn
bad_input single "--memory-snapshot=$TMP/m.pickle: the snapshot is the CUDA caching allocator's history, which needs --device=cuda" --memory-snapshot="$TMP/m.pickle"
bad_input single "--cpu-malloc=jemalloc: not accepted; accepted values: reuse|system" --cpu-malloc=jemalloc
echo "speed_flags: all checks passed"
