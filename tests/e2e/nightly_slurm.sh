#!/usr/bin/env bash
# The nightly job under real Slurm: a private two-node cluster on localhost
# (lib/slurm_cluster.sh: nodes n1 and n2, one slurmd each), `sbatch -N2
# scripts/nightly.sbatch` on a tiny matrix with a single-node entry (ranks
# spawned by the binary) and a multi-node entry (nightly.py's srun across both
# nodes). Checked: the job completes; one night's CSV with both rows, the same
# run_id and their entries, the multi-node row launcher=slurm, nodes=2,
# parity; the markdown, HTML and figures; the gate's line in the job's log.
set -euo pipefail
BIN="$1"; SRC="$2"
TMP="$(mktemp -d)"
source "$SRC/tests/e2e/lib/launch_common.sh"
source "$SRC/tests/e2e/lib/slurm_cluster.sh"
clear_launcher_env
"$PY" -c "import matplotlib, tomllib" 2>/dev/null || skip ".venv with Python >= 3.11 and matplotlib not found"
trap stop_slurm_cluster EXIT
start_slurm_cluster 2

cat >"$TMP/work/m.toml" <<'EOF'
[defaults]
device = "cpu"
model = "resnet18"
width = 4
small_input = true
image_size = 16
batch_size = 8
steps = 4
warmup = 1
oversubscribe = true
[[run]]
name = "single-1x1"
strategy = "single"
[[run]]
name = "ddp-1x2"
strategy = "ddp"
nodes = 2
flags = ["--verify"]
EOF
JOBID="$(cd "$SRC" && MATRIX="$TMP/work/m.toml" OUT_DIR="$TMP/nights" RUN_ID=slurm-night \
  timeout 30 sbatch --parsable -N2 --ntasks-per-node=1 --output="$TMP/job.log" scripts/nightly.sbatch --bin="$BIN")" \
  || fail "sbatch failed: $(daemon_logs)"
wait_batch_job "$JOBID" "$TMP/job.log" 180
"$PY" - "$TMP/nights" <<'PYEOF' || fail "night files: $(cat "$TMP/job.log")"
import csv, os, sys
d = sys.argv[1]
rows = list(csv.DictReader(open(os.path.join(d, "slurm-night.csv"))))
assert [(r["run_id"], r["entry"]) for r in rows] == [("slurm-night", "single-1x1"), ("slurm-night", "ddp-1x2")], rows
single, ddp = rows
assert (single["launcher"], single["nodes"]) == ("none", "1"), single
want = {"launcher": "slurm", "nodes": "2", "world_size": "2", "gpus": "2", "parity_ok": "true"}
assert {k: ddp[k] for k in want} == want, {k: ddp[k] for k in want}
assert not os.path.exists(os.path.join(d, "slurm-night.failures.csv"))
for suffix in (".md", ".html", "_throughput.png", "_memory.png", "_scaling.png"):
    assert os.path.getsize(os.path.join(d, "slurm-night" + suffix)) > 0, suffix
assert "| ddp-1x2 | 1 x 2 |" in open(os.path.join(d, "slurm-night.md")).read()
PYEOF
grep -q "gate: 2 rows against 0 earlier nights" "$TMP/job.log" || fail "no gate in the job log: $(cat "$TMP/job.log")"
echo "nightly_slurm: all checks passed"
