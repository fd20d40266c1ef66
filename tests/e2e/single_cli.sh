#!/usr/bin/env bash
# End to end through the real binary: the issue's single-device command
# appends exactly one well-formed row; bad inputs exit non-zero with one
# message and leave the results file untouched; Fashion-MNIST reports an
# accuracy (tiny run: only checks that it is present and a probability).
set -euo pipefail
BIN="$1"; SRC="$2"
TMP="$(mktemp -d)"; trap 'rm -rf "$TMP"' EXIT
PY="$SRC/.venv/bin/python"; [[ -x "$PY" ]] || PY=python3
fail() { echo "FAIL: $*"; exit 1; }

"$BIN" --list | grep -q "^single " || fail "--list does not show single"

"$BIN" --strategy=single --device=cpu --model=resnet18 --dataset=synthetic --image-size=32 \
  --batch-size=16 --steps=20 --warmup=5 --out="$TMP/r.csv" --width=16
[[ $(wc -l < "$TMP/r.csv") -eq 2 ]] || fail "expected header + 1 row"
"$PY" - "$TMP/r.csv" <<'PYEOF'
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1])))
assert len(rows) == 1, rows
r = rows[0]
checks = {"strategy": "single", "gpus": "1", "device": "cpu", "threads_per_device": "1",
          "model": "resnet18", "dataset": "synthetic", "image_size": "32", "per_device_batch": "16",
          "global_batch": "16", "steps": "20", "warmup": "5", "amp": "off", "world_size": "1"}
for k, v in checks.items():
    assert r[k] == v, (k, r[k], v)
for k in ["throughput_img_s", "step_ms_p50", "step_ms_p90", "peak_mem_mb", "final_loss", "forward_ms",
          "backward_ms", "optimizer_ms", "peak_rss_mb"]:
    assert float(r[k]) > 0, (k, r[k])
assert float(r["step_ms_p90"]) >= float(r["step_ms_p50"])
# Figures that do not apply are empty, never 0.
for k in ["accuracy", "scaling_efficiency", "parity_max_abs_diff", "cuda_version", "mem_reserved_per_device_mb"]:
    assert r[k] == "", (k, r[k])
assert r["torch_version"].startswith("2.11"), r["torch_version"]
assert "--batch-size=16" in r["command"] and r["git_sha"] and r["timestamp"].endswith("Z")
print("row ok:", r["throughput_img_s"], "img/s")
PYEOF

# Bad inputs: exit 2, one "ddpbench: error:" line naming the value, no row.
cp "$TMP/r.csv" "$TMP/before.csv"
bad() {
  local expect="$1"; shift
  set +e; out="$("$BIN" "$@" --out="$TMP/r.csv" 2>&1 </dev/null)"; rc=$?; set -e
  [[ $rc -eq 2 ]] || fail "$* exited $rc (want 2): $out"
  grep -q "ddpbench: error: .*$expect" <<<"$out" || fail "$*: message lacks '$expect': $out"
  cmp -s "$TMP/r.csv" "$TMP/before.csv" || fail "$*: results file changed"
}
bad "--batch-size=0" --batch-size=0
bad "--strategy=nope" --strategy=nope
bad "--device=cuda: no CUDA device" --device=cuda --steps=1
bad "--gpus=2: the 'single' strategy uses exactly one device" --gpus=2 --steps=1
bad "data directory for 'cifar10' does not exist" --dataset=cifar10 --data-dir="$TMP/none" --steps=1
bad "$TMP/none" --dataset=mnist --data-dir="$TMP/none" --steps=1
bad "threads but this machine has" --threads-per-device=4096 --steps=1

# A results file with another header is refused (exit 4) and left as it was.
printf 'a,b\n1,2\n' > "$TMP/foreign.csv"
set +e; "$BIN" --device=cpu --image-size=32 --width=8 --small-input --batch-size=4 --steps=1 --warmup=0 \
  --out="$TMP/foreign.csv" >/dev/null 2>&1; rc=$?; set -e
[[ $rc -eq 4 ]] || fail "foreign header: exit $rc (want 4)"
[[ "$(cat "$TMP/foreign.csv")" == $'a,b\n1,2' ]] || fail "foreign file modified"

# Real data: accuracy is reported for Fashion-MNIST.
if [[ -d /usr/share/datasets/fashion-mnist ]]; then
  "$BIN" --strategy=single --device=cpu --dataset=fashion-mnist --small-input --width=8 --batch-size=64 \
    --steps=10 --warmup=1 --eval-batches=5 --out="$TMP/f.csv"
  "$PY" - "$TMP/f.csv" <<'PYEOF'
import csv, sys
r = list(csv.DictReader(open(sys.argv[1])))[0]
assert 0.0 <= float(r["accuracy"]) <= 1.0 and r["image_size"] == "28", r
print("fashion-mnist accuracy after 11 steps:", r["accuracy"])
PYEOF
fi
# A measured run keeps its row: the standard stem at 32 px and 4 images (the
# memory expectation's small batch must still train batch norm) writes its row
# with default flags; an expectation step that fails on purpose leaves its
# column empty, says why, exits 8, and the row is still written.
SMALL=(--strategy=single --device=cpu --model=resnet18 --dataset=synthetic --image-size=32 --batch-size=4 --steps=2
       --warmup=1 --width=8 --progress=off)
"$BIN" "${SMALL[@]}" --out="$TMP/kept.csv" >"$TMP/kept.log" 2>&1 || fail "32 px batch 4: $(tail -3 "$TMP/kept.log")"
set +e
DDPBENCH_TEST_FAIL_AT=expected "$BIN" "${SMALL[@]}" --out="$TMP/kept.csv" >"$TMP/failed.log" 2>&1
RC=$?; set -e
[[ $RC -eq 8 ]] || fail "a failed expectation step: exit $RC, want 8: $(tail -3 "$TMP/failed.log")"
grep -q "expected failed after the timed steps: test failure point expected" "$TMP/failed.log" ||
  fail "the failure is not said: $(tail -3 "$TMP/failed.log")"
"$PY" - "$TMP/kept.csv" <<'PYEOF'
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1])))
assert len(rows) == 2, len(rows)
assert float(rows[0]["memory_expected_mb"]) > 0 and float(rows[0]["throughput_img_s"]) > 0, rows[0]
assert rows[1]["memory_expected_mb"] == "" and float(rows[1]["throughput_img_s"]) > 0, rows[1]
PYEOF
echo "single_cli: all checks passed"
