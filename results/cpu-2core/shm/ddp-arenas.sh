#!/bin/bash
# ddp over shared memory (2 ranks x 1 thread, ResNet-18 64 px, batch 16 per rank) with its gradient
# buckets in the ranks' shared-memory arenas against the same run with DDPBENCH_SHM_ARENAS=0 (the
# buckets on the heap, all-reduced through the group's slots), and single for the scaling
# efficiency, ABBA-interleaved rounds.
#   bash results/cpu-2core/shm/ddp-arenas.sh OUT.csv [ROUNDS=6]
cd "$(dirname "$0")/../../.." || exit 1
OUT=${1:?usage: ddp-arenas.sh OUT.csv [ROUNDS]}; ROUNDS=${2:-6}
COMMON=(--device=cpu --model=resnet18 --image-size=64 --batch-size=16 --threads-per-device=1 --steps=20 --warmup=5
        --no-eval --progress=off --cpu-malloc=reuse --out="$OUT")
for r in $(seq "$ROUNDS"); do
  order=(slots arenas single); (( r % 2 == 0 )) && order=(single arenas slots)
  for e in "${order[@]}"; do
    case $e in
      single) build/ddpbench --strategy=single "${COMMON[@]}" --run-id=$e-r$r --entry=$e ;;
      slots) DDPBENCH_SHM_ARENAS=0 build/ddpbench --strategy=ddp --gpus=2 --cpu-backend=shm "${COMMON[@]}" \
               --run-id=$e-r$r --entry=ddp-$e ;;
      arenas) build/ddpbench --strategy=ddp --gpus=2 --cpu-backend=shm "${COMMON[@]}" --run-id=$e-r$r --entry=ddp-$e ;;
    esac >/dev/null 2>&1 || echo "failed $e $r"
  done
done
.venv/bin/python - "$OUT" <<'PY'
import collections, csv, statistics, sys
by = collections.defaultdict(dict)
for r in csv.DictReader(l for l in open(sys.argv[1]) if not l.startswith("#")):
    by[r["entry"]][r["run_id"].rsplit("-r", 1)[1]] = float(r["throughput_img_s"])
for e, v in sorted(by.items()):
    print(f"{e:12s} median {statistics.median(v.values()):6.1f} img/s ({', '.join(f'{x:.1f}' for x in v.values())})")
def ratio(a, b, scale=1.0):
    rounds = sorted(set(by[a]) & set(by[b]))
    per = [by[a][k] / (scale * by[b][k]) for k in rounds]
    return statistics.median(by[a].values()) / (scale * statistics.median(by[b].values())), statistics.median(per)
for name, (a, b, k) in {"arenas / slots": ("ddp-arenas", "ddp-slots", 1),
                        "scaling, arenas (ddp / 2 x single)": ("ddp-arenas", "single", 2),
                        "scaling, slots": ("ddp-slots", "single", 2)}.items():
    m, p = ratio(a, b, k)
    print(f"{name}: {m:.3f} (median of per-round ratios {p:.3f})")
PY
