#!/usr/bin/env bash
# The projection's calibration end to end through the real binary:
# --calibrate on 2 spawned ranks writes a profile with every unit, the link's
# all-reduce fit and its own reduce-scatter and all-gather fits (what zero1/2/3
# run), each with its measured points at 8 sizes (the link's table), and the
# point-to-point hand-off (pmp --stage-ranks) at 1 and 4 KiB and the 7 of them up to 4 MiB,
# faster per call than an all-reduce; --project reads it back (measured link,
# an override of it); --expected=PROFILE takes it for a run's expected figure;
# a profile of another model and a file that is not a profile are one message,
# exit 2, and no row.
set -euo pipefail
BIN="$1"; SRC="$2"
TMP="$(mktemp -d)"; trap 'rm -rf "$TMP"' EXIT
PY="$SRC/.venv/bin/python"; [[ -x "$PY" ]] || PY=python3
fail() { echo "FAIL: $*"; exit 1; }
WORK=(--device=cpu --model=resnet18 --width=8 --image-size=16 --batch-size=8 --progress=off)

# Over Gloo, whose hand-off is the one compared with its all-reduce (over
# shared memory, the default, the all-reduce is the faster of the two).
"$BIN" --calibrate="$TMP/p.json" --strategy=ddp --gpus=2 --cpu-backend=gloo "${WORK[@]}" > "$TMP/cal.log" 2>&1 \
  || { cat "$TMP/cal.log"; fail "--calibrate failed"; }
"$PY" - "$TMP/p.json" <<'EOF'
import json, sys
p = json.load(open(sys.argv[1]))
assert p["model"] == "resnet18" and p["width"] == 8 and p["batch_size"] == 8, p["model"]
assert len(p["units"]) == 10, [u["name"] for u in p["units"]]
link = p["link"]
assert link["ranks"] == 2 and link["bandwidth_gb_s"] > 0 and link["alpha_us"] >= 0, link
own = link["collectives"]
assert set(own) - {"point-to-point"} == {"reduce-scatter", "all-gather"}, own  # p2p: unless too noisy to fit
assert all(f["bandwidth_gb_s"] > 0 and f["alpha_us"] >= 0 for f in own.values()), own
measured = {m["collective"]: m["points"] for m in link["measured"]}
assert set(measured) == {"all-reduce", "reduce-scatter", "all-gather", "point-to-point"}, measured.keys()
sizes = [16 << 10, 64 << 10, 256 << 10, 512 << 10, 1 << 20, 2 << 20, 4 << 20, 16 << 20]
p2p = measured.pop("point-to-point")
assert [b for b, _ in p2p] == [1 << 10, 4 << 10] + sizes[:-1] and all(t > 0 for _, t in p2p), p2p
assert all([b for b, _ in v] == sizes and all(t > 0 for _, t in v) for v in measured.values()), measured
# One hand-off of 16 KiB moves one buffer one way: quicker than the all-reduce of it.
assert p2p[2][1] < measured["all-reduce"][0][1], (p2p[2], measured["all-reduce"][0])
print("profile ok:", {k: (round(f["alpha_us"], 1), round(f["bandwidth_gb_s"], 3)) for k, f in own.items()})
EOF

for inter in measured "measured,bw=100Mbit/s"; do
  "$BIN" --project="$TMP/p.json" --nodes=1,2 --gpus-per-node=2 --inter="$inter" --strategies=ddp,zero1,zero3 \
    --project-csv="$TMP/t.csv" > "$TMP/proj.log" 2>&1 || { cat "$TMP/proj.log"; fail "--project --inter=$inter"; }
  "$PY" - "$TMP/t.csv" <<'EOF'
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1])))
got = {(r["strategy"], r["world"]) for r in rows if float(r["img_s"]) > 0}
assert {("ddp", "4"), ("zero1", "4"), ("zero3", "4")} <= got, got
EOF
done
# Slower link between the nodes: zero1 across 2 nodes at 100 Mbit/s below itself on the measured link.
"$BIN" --project="$TMP/p.json" --nodes=2 --gpus-per-node=1 --inter=measured --strategies=zero1 \
  --project-csv="$TMP/fast.csv" > /dev/null
"$BIN" --project="$TMP/p.json" --nodes=2 --gpus-per-node=1 --inter="measured,bw=100Mbit/s" --strategies=zero1 \
  --project-csv="$TMP/slow.csv" > /dev/null
"$PY" - "$TMP/fast.csv" "$TMP/slow.csv" <<'EOF'
import csv, sys
fast, slow = (float(list(csv.DictReader(open(p)))[0]["img_s"]) for p in sys.argv[1:])
assert slow < fast, (slow, fast)
EOF

# A run takes the profile for its expected figure.
"$BIN" --strategy=zero1 --gpus=2 "${WORK[@]}" --steps=3 --warmup=1 --no-eval --expected="$TMP/p.json" \
  --out="$TMP/r.csv" > "$TMP/run.log" 2>&1 || { cat "$TMP/run.log"; fail "--expected=PROFILE run"; }
"$PY" - "$TMP/r.csv" "$TMP/p.json" <<'EOF'
import csv, sys
row = list(csv.DictReader(open(sys.argv[1])))[-1]
assert float(row["expected_img_s"]) > 0 and row["expected_from"] == sys.argv[2], row
EOF

# One device: ddp's step against its own parts (no link); single gets no figure.
for s in ddp single; do
  "$BIN" --strategy=$s --gpus=1 "${WORK[@]}" --steps=3 --warmup=1 --no-eval --out="$TMP/one.csv" > "$TMP/run.log" 2>&1 \
    || { cat "$TMP/run.log"; fail "--strategy=$s --gpus=1"; }
done
"$PY" - "$TMP/one.csv" <<'EOF'
import csv, sys
ddp, single = list(csv.DictReader(open(sys.argv[1])))
assert float(ddp["expected_img_s"]) > 0 and ddp["expected_term"] == "compute", ddp
assert float(ddp["vs_expected"]) > 0 and ddp["expected_from"] == "measured after the run", ddp
assert single["expected_img_s"] == "" and single["vs_expected"] == "", single
EOF

# Bad inputs: one message naming the value, exit 2, the results file untouched.
cp "$TMP/r.csv" "$TMP/before.csv"
bad() {
  local want="$1"; shift
  set +e; "$BIN" "$@" --out="$TMP/r.csv" > "$TMP/bad.log" 2>&1; local rc=$?; set -e
  [[ $rc -eq 2 ]] || { cat "$TMP/bad.log"; fail "exit $rc (want 2): $*"; }
  grep -q -- "$want" "$TMP/bad.log" || { cat "$TMP/bad.log"; fail "no '$want' in the message: $*"; }
  cmp -s "$TMP/r.csv" "$TMP/before.csv" || fail "the results file changed: $*"
}
bad "resnet50" --strategy=ddp --gpus=2 --device=cpu --model=resnet50 --width=8 --image-size=16 --batch-size=8 \
  --progress=off --steps=2 --expected="$TMP/p.json"
echo '{"version": 1}' > "$TMP/not.json"
bad "field 'model' is missing" --strategy=ddp --gpus=2 "${WORK[@]}" --steps=2 --expected="$TMP/not.json"
echo "calibrate e2e ok"
