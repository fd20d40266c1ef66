#!/usr/bin/env bash
# ddpbench's single strategy against plain PyTorch eager (research/rigs/pytorch_eager.py)
# on the same workload, interleaved (ddpbench, PyTorch, ddpbench, ...) so that
# machine noise hits both alike; prints each pair and the median ratio, and
# appends the figures with the command and machine to OUT.
#   research/rigs/compare_pytorch.sh [ROUNDS] -- DDPBENCH_AND_PYTORCH_FLAGS...
# The flags both understand: --model --image-size --batch-size --device --amp
# --memory-format --steps --warmup (CPU: both use 1 thread; set THREADS).
# Both use the same host malloc: MALLOC=reuse (default: ddpbench's
# --cpu-malloc=reuse, PyTorch under the same glibc settings) or system.
# Example (CPU, the issue-9 goal): research/rigs/compare_pytorch.sh 5 -- --device=cpu
#   --model=resnet18 --image-size=64 --batch-size=16 --memory-format=contiguous --steps=20 --warmup=5
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
BIN="${BIN:-$ROOT/build/ddpbench}"
PY="${PY:-$ROOT/.venv/bin/python}"
OUT="${OUT:-$ROOT/results/compare_pytorch.csv}"
THREADS="${THREADS:-1}"
MALLOC="${MALLOC:-reuse}"
case "$MALLOC" in
  reuse) TUNABLES="glibc.malloc.arena_max=1:glibc.malloc.mmap_threshold=33554432:glibc.malloc.trim_threshold=2147483647" ;;
  system) TUNABLES="${GLIBC_TUNABLES:-}" ;;
  *) echo "compare_pytorch.sh: MALLOC=$MALLOC: want reuse or system" >&2; exit 2 ;;
esac
ROUNDS="${1:-5}"; shift || true
[[ "${1:-}" == "--" ]] && shift
[[ "$ROUNDS" =~ ^[1-9][0-9]*$ ]] || { echo "compare_pytorch.sh: ROUNDS=$ROUNDS: want a positive integer" >&2; exit 2; }
FLAGS=("$@")
TMP="$(mktemp -d)"; trap 'rm -rf "$TMP"' EXIT
pairs=()
for ((i = 1; i <= ROUNDS; i++)); do
  "$BIN" --strategy=single --threads-per-device="$THREADS" --cpu-malloc="$MALLOC" --progress=off "${FLAGS[@]}" \
    --out="$TMP/rows.csv" 2>/dev/null
  ours="$("$PY" -c 'import csv,sys; print(list(csv.DictReader(open(sys.argv[1])))[-1]["throughput_img_s"])' "$TMP/rows.csv")"
  theirs="$(GLIBC_TUNABLES="$TUNABLES" "$PY" "$ROOT/research/rigs/pytorch_eager.py" --threads="$THREADS" "${FLAGS[@]}" |
    sed 's/.*img\/s=//')"
  echo "round $i: ddpbench $ours img/s, pytorch eager $theirs img/s"
  pairs+=("$ours:$theirs")
done
"$PY" - "$OUT" "$TMP/rows.csv" "${FLAGS[*]}" "${pairs[@]}" <<'PYEOF'
import csv, os, socket, statistics, sys
out, rows, flags, pairs = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]
row = list(csv.DictReader(open(rows)))[-1]
ours = [float(p.split(":")[0]) for p in pairs]
theirs = [float(p.split(":")[1]) for p in pairs]
ratio = statistics.median(o / t for o, t in zip(ours, theirs))
print(f"median ddpbench/pytorch = {ratio:.3f} over {len(pairs)} interleaved rounds "
      f"(ddpbench median {statistics.median(ours):.2f}, pytorch median {statistics.median(theirs):.2f} img/s)")
new = not os.path.exists(out)
with open(out, "a", newline="") as f:
    w = csv.writer(f)
    if new:
        w.writerow(["timestamp", "host", "device_name", "git_sha", "torch_version", "flags", "rounds",
                    "ddpbench_img_s", "pytorch_img_s", "median_ratio", "command"])
    w.writerow([row["timestamp"], socket.gethostname(), row["device_name"], row["git_sha"], row["torch_version"],
                flags, len(pairs), "/".join(f"{x:.2f}" for x in ours), "/".join(f"{x:.2f}" for x in theirs),
                f"{ratio:.3f}", "research/rigs/compare_pytorch.sh " + str(len(pairs)) + " -- " + flags])
PYEOF
