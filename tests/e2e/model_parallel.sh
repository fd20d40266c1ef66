#!/usr/bin/env bash
# End to end through the real binary: dp, mp and pmp (every schedule) on two
# CPU logical devices each append one well-formed row that passes --verify
# against single (float64), every schedule with SGD and Adam on 2 and 3
# devices; dp's scaling efficiency comes from the single row in the same
# file; bad inputs exit 2 with one message naming the value and leave the
# results file untouched.
set -euo pipefail
BIN="$1"; SRC="$2"
TMP="$(mktemp -d)"; trap 'rm -rf "$TMP"' EXIT
PY="$SRC/.venv/bin/python"; [[ -x "$PY" ]] || PY=python3
fail() { echo "FAIL: $*"; exit 1; }
# 2 logical devices of 1 thread; more threads than cores needs --oversubscribe.
OVER=""; [[ $(nproc) -lt 2 ]] && OVER="--oversubscribe"

for s in dp mp pmp; do "$BIN" --list | grep -q "^$s " || fail "--list does not show $s"; done

# --expected=off: no expectation is checked here (the *_cli tests and e2e.docs run
# that calibration); it would double the time of each small multi-rank run.
COMMON=(--device=cpu --small-input --width=8 --image-size=16 --num-classes=10 --steps=4 --warmup=1
        --progress=off --expected=off --out="$TMP/r.csv")
"$BIN" --strategy=single "${COMMON[@]}" --batch-size=8
"$BIN" --strategy=dp --gpus=2 $OVER "${COMMON[@]}" --batch-size=8 --verify
"$BIN" --strategy=mp --gpus=2 $OVER "${COMMON[@]}" --batch-size=16 --balance=params --verify
"$BIN" --strategy=pmp --gpus=2 $OVER "${COMMON[@]}" --batch-size=16 --chunks=4 --schedule=gpipe --balance=params --verify
"$BIN" --strategy=pmp --gpus=2 $OVER "${COMMON[@]}" --batch-size=16 --chunks=4 --schedule=1f1b --balance=params --verify
"$BIN" --strategy=pmp --gpus=2 $OVER "${COMMON[@]}" --batch-size=16 --chunks=2 --split=5,5 --balance=time
# Defaults (time-balanced split; micro-batches and schedule chosen by predicted
# step time), then every schedule (looped-bfs, zbv, dualpipev too) against single
# in float64, with SGD on 3 devices (a middle stage) and Adam on 2: every schedule
# meets both optimizers and both device counts.
"$BIN" --strategy=pmp --gpus=2 $OVER "${COMMON[@]}" --batch-size=16 --verify
PAR=(--device=cpu --small-input --width=8 --image-size=16 --num-classes=10 --steps=2 --warmup=0 --progress=off
     --verify --verify-steps=2 --out="$TMP/parity.csv")
for case in "3 --optimizer=sgd" "2 --optimizer=adam --lr=0.001"; do
  read -r g opt <<<"$case"
  for sched in gpipe 1f1b interleaved zero-bubble interleaved-zero-bubble looped-bfs zbv dualpipev; do
    "$BIN" --strategy=pmp --gpus=$g --oversubscribe "${PAR[@]}" $opt --batch-size=$((4 * g)) --chunks=$((2 * g)) \
      --schedule=$sched >/dev/null 2>&1 || fail "parity run: $g devices, $sched, $opt"
  done
done

"$PY" - "$TMP/r.csv" <<'PYEOF'
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1])))
assert [r["strategy"] for r in rows] == ["single", "dp", "mp", "pmp", "pmp", "pmp", "pmp"], [r["strategy"] for r in rows]
single, dp, mp, gpipe, f1b, explicit, default = rows
for r in rows[1:]:
    assert r["gpus"] == "2" and r["world_size"] == "1", r
    mem = [float(x) for x in r["mem_per_device_mb"].split("/")]
    assert len(mem) == 2 and all(m > 0 for m in mem), (r["strategy"], r["mem_per_device_mb"])
    assert float(r["throughput_img_s"]) > 0 and float(r["forward_ms"]) > 0 and float(r["backward_ms"]) > 0
for r in rows[1:5] + [default]:
    assert r["parity_ok"] == "true" and float(r["parity_max_abs_diff"]) <= 1e-10, (r["strategy"], r["parity_max_abs_diff"])
# dp: batch per device, global = 2x; its efficiency against the single row (same per-device batch).
assert dp["per_device_batch"] == "8" and dp["global_batch"] == "16", dp
assert float(dp["scaling_efficiency"]) > 0 and dp["parity_model"] == "resnet18 norm=group amp=off dtype=float64", dp
assert dp["split"] == dp["bubble_measured"] == "", dp
# mp: the same maths as single, BatchNorm included; one micro-batch.
assert mp["parity_model"] == "resnet18 norm=batch amp=off dtype=float64" and mp["split"] == "8,2" and mp["chunks"] == "1", mp
assert abs(float(mp["bubble_theory"]) - 0.5) < 1e-9 and mp["schedule"] == "", mp
for r, sched in ((gpipe, "gpipe"), (f1b, "1f1b")):
    assert r["schedule"] == sched and r["chunks"] == "4" and r["split"] == "8,2", r
    assert r["parity_model"] == "resnet18 norm=group amp=off dtype=float64", r
    assert abs(float(r["bubble_theory"]) - 1 / 5) < 1e-4, r["bubble_theory"]
    assert 0 <= float(r["bubble_measured"]) < 1, r["bubble_measured"]
    busy = [float(x) for x in r["stage_busy_ms"].split("/")]
    assert len(busy) == 2 and all(b > 0 for b in busy), r["stage_busy_ms"]
# --split wins over --balance; the row records the split used.
assert explicit["split"] == "5,5" and explicit["chunks"] == "2", explicit
assert abs(float(explicit["bubble_theory"]) - 1 / 3) < 1e-4, explicit
# Defaults: split by measured time, a schedule at a chosen micro-batch count; each stage's measured
# time and peak activations recorded.
V = int(default["virtual_stages"])
assert default["schedule"] in ("1f1b", "zero-bubble", "interleaved", "interleaved-zero-bubble", "looped-bfs", "zbv", "dualpipev") and len(default["split"].split(",")) == 2 * V, default
assert 16 % int(default["chunks"]) == 0, default
for r in (default, gpipe, f1b, mp):
    assert len(r["stage_time_ms"].split("/")) == len(r["split"].split(",")) and all(float(x) > 0 for x in r["stage_time_ms"].split("/")), r
    assert all(float(x) > 0 for x in r["activation_peak_mb"].split("/")), r["activation_peak_mb"]
# Every schedule with SGD on 3 devices and Adam on 2: parity with single in float64.
par = list(csv.DictReader(open(sys.argv[1].replace("r.csv", "parity.csv"))))
assert len(par) == 16, len(par)
assert sorted((r["gpus"], r["optimizer"]) for r in par) == [("2", "adam")] * 8 + [("3", "sgd")] * 8, \
    [(r["gpus"], r["optimizer"]) for r in par]
for r in par:
    assert r["parity_ok"] == "true" and float(r["parity_max_abs_diff"]) <= 1e-10, (r["command"], r["parity_max_abs_diff"])
    assert r["schedule"] in ("gpipe", "1f1b", "interleaved", "zero-bubble", "interleaved-zero-bubble", "looped-bfs", "zbv", "dualpipev"), r["schedule"]
    if r["schedule"].startswith("interleaved") or r["schedule"] in ("looped-bfs", "zbv", "dualpipev"):
        assert r["virtual_stages"] == "2" and len(r["split"].split(",")) == 2 * int(r["gpus"]), r
    if r["schedule"].endswith("zero-bubble") or r["schedule"] in ("zbv", "dualpipev"):
        assert len(r["chunk_fbw_ms"].split("/")[0].split(":")) == 3, r["chunk_fbw_ms"]
        assert 0 <= float(r["bubble_theory"]) < 1, r["bubble_theory"]
print("rows ok: dp", dp["throughput_img_s"], "mp", mp["throughput_img_s"], "pmp", gpipe["throughput_img_s"],
      f1b["throughput_img_s"], "img/s; pmp bubble", gpipe["bubble_measured"], "vs", gpipe["bubble_theory"])
PYEOF

# Bad inputs: exit 2, one "ddpbench: error:" line naming the value, no row.
cp "$TMP/r.csv" "$TMP/before.csv"
bad() {
  local expect="$1"; shift
  set +e; out="$("$BIN" "${COMMON[@]}" "$@" 2>&1 </dev/null)"; rc=$?; set -e
  [[ $rc -eq 2 ]] || fail "$* exited $rc (want 2): $out"
  grep -q "ddpbench: error: .*$expect" <<<"$out" || fail "$*: message lacks '$expect': $out"
  [[ $(grep -c "ddpbench: error:" <<<"$out") -eq 1 ]] || fail "$*: not one message: $out"
  cmp -s "$TMP/r.csv" "$TMP/before.csv" || fail "$*: results file changed"
}
bad "--chunks=3: --batch-size=16 does not divide into 3 equal micro-batches; accepted: a divisor of 16" \
  --strategy=pmp --gpus=2 $OVER --batch-size=16 --chunks=3
bad "--chunks=0: must be at least 1" --strategy=pmp --gpus=2 $OVER --chunks=0
bad "--gpus=11: mp puts at least one unit on each device, but the model has only 10 units: stem, layer1.0" \
  --strategy=mp --gpus=11 --oversubscribe
bad "--split=4,4: the counts sum to 8, not 10" --strategy=mp --gpus=2 $OVER --split=4,4
bad "--split=2,2,6: 3 counts for 2 stages" --strategy=pmp --gpus=2 $OVER --split=2,2,6
bad "--virtual-stages=6: --gpus=2 x 6 = 12 model chunks, but the model has only 10 units" \
  --strategy=pmp --gpus=2 $OVER --schedule=interleaved --virtual-stages=6
bad "--chunks=2: --schedule=zero-bubble needs at least 3 micro-batches on --gpus=3 (one per device); accepted: --chunks>=3" \
  --strategy=pmp --gpus=3 --oversubscribe --batch-size=8 --chunks=2 --schedule=zero-bubble
bad "--chunks=4: --schedule=interleaved takes micro-batches in groups of --gpus=3" \
  --strategy=pmp --gpus=3 --oversubscribe --batch-size=12 --chunks=4 --schedule=interleaved
bad "--chunks=4: --schedule=interleaved-zero-bubble takes micro-batches in groups of --gpus=3" \
  --strategy=pmp --gpus=3 --oversubscribe --batch-size=12 --chunks=4 --schedule=interleaved-zero-bubble
bad "--virtual-stages=2: applies only to --schedule=interleaved|interleaved-zero-bubble|looped-bfs (and 2 to zbv|dualpipev), not to --schedule=zero-bubble" \
  --strategy=pmp --gpus=2 $OVER --schedule=zero-bubble --virtual-stages=2
bad "--virtual-stages=3: --schedule=zbv places exactly 2 chunks per device in a V" \
  --strategy=pmp --gpus=2 $OVER --schedule=zbv --virtual-stages=3
bad "--chunks=2: --schedule=dualpipev needs at least 4 micro-batches on --gpus=2 (one per stage of its V)" \
  --strategy=pmp --gpus=2 $OVER --batch-size=8 --chunks=2 --schedule=dualpipev
bad "--chunks=4: applies only to --strategy=pmp, not to --strategy=mp" --strategy=mp --gpus=2 $OVER --chunks=4
bad "--bucket-cap-mb=1: applies only to --strategy=ddp|zero1|zero2|zero3|hsdp, not to --strategy=pmp" --strategy=pmp --gpus=2 $OVER --bucket-cap-mb=1
bad "--schedule=zb" --strategy=pmp --gpus=2 $OVER --schedule=zb
bad "--gpus=1000 x --threads-per-device=1: 1000 threads" --strategy=dp --gpus=1000
echo "model_parallel: all checks passed"
