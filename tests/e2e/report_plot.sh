#!/usr/bin/env bash
# Rows -> comparison table -> figures: two real runs, then scripts/report.py
# and scripts/plot_results.py must read them, and refuse a file that is not
# ddpbench's.
set -euo pipefail
BIN="$1"; SRC="$2"
TMP="$(mktemp -d)"; trap 'rm -rf "$TMP"' EXIT
PY="$SRC/.venv/bin/python"
[[ -x "$PY" ]] && "$PY" -c "import matplotlib" 2>/dev/null || { echo "SKIP: .venv with matplotlib not found (run scripts/setup.sh)"; exit 77; }
common=(--device=cpu --dataset=synthetic --image-size=32 --small-input --width=8 --num-classes=10 --steps=3 --warmup=1 --out="$TMP/r.csv")
"$BIN" --strategy=single --batch-size=8 "${common[@]}" 2>/dev/null
"$BIN" --strategy=single --batch-size=16 "${common[@]}" 2>/dev/null
"$PY" "$SRC/scripts/report.py" "$TMP/r.csv" > "$TMP/table.md"
[[ $(grep -c "^| single " "$TMP/table.md") -eq 2 ]] || { cat "$TMP/table.md"; echo "FAIL: table rows"; exit 1; }
"$PY" "$SRC/scripts/plot_results.py" "$TMP/r.csv" --out "$TMP/fig/cpu" >/dev/null
for f in "$TMP/fig/cpu_throughput.png" "$TMP/fig/cpu_memory.png"; do
  [[ "$(head -c 4 "$f" | tail -c 3)" == "PNG" ]] || { echo "FAIL: $f is not a PNG"; exit 1; }
done
printf 'x,y\n1,2\n' > "$TMP/other.csv"
if "$PY" "$SRC/scripts/report.py" "$TMP/other.csv" 2>"$TMP/err"; then echo "FAIL: foreign CSV accepted"; exit 1; fi
grep -q "not a ddpbench results file" "$TMP/err" || { cat "$TMP/err"; echo "FAIL: message"; exit 1; }
echo "report_plot: all checks passed"
