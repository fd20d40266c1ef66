#!/bin/bash
# A/B: OLD NEW binaries, ddp views shm, plus single with NEW; rounds alternate order
OLD=$1; NEW=$2; OUT=$3; ROUNDS=${4:-6}; EXTRA=${EXTRA:-}
C=(--device=cpu --model=resnet18 --image-size=64 --batch-size=16 --threads-per-device=1 --steps=${STEPS:-20} --warmup=5 --no-eval --progress=off --cpu-malloc=reuse --expected=off)
run() { # label bin strategy gpus extra...
  local label=$1 bin=$2 s=$3 g=$4; shift 4
  rm -f /tmp/ab/run.csv
  $bin --strategy=$s --gpus=$g "${C[@]}" "$@" --out=/tmp/ab/run.csv > /tmp/ab/log 2>&1 || { echo "fail $label"; tail -3 /tmp/ab/log; return; }
  v=$(python3 -c 'import csv,sys; print(list(csv.DictReader(open(sys.argv[1])))[-1]["throughput_img_s"])' /tmp/ab/run.csv)
  echo "$r,$label,$v" | tee -a $OUT
}
for r in $(seq $ROUNDS); do
  if (( r % 2 )); then
    run old $OLD ddp 2 --cpu-backend=shm --gradient-as-bucket-view $OLDX; run new $NEW ddp 2 --cpu-backend=shm --gradient-as-bucket-view $NEWX; run single $NEW single 1
  else
    run single $NEW single 1; run new $NEW ddp 2 --cpu-backend=shm --gradient-as-bucket-view $NEWX; run old $OLD ddp 2 --cpu-backend=shm --gradient-as-bucket-view $OLDX
  fi
done
python3 - $OUT <<'PY'
import csv,sys,statistics as st
rows=[l.strip().split(',') for l in open(sys.argv[1])]
d={}
for r,l,v in rows: d.setdefault(l,{})[r]=float(v)
m={l:st.median(v.values()) for l,v in d.items()}
print({l:round(x,2) for l,x in m.items()})
print("new/old %.3f  per-round median %.3f" % (m['new']/m['old'], st.median(d['new'][r]/d['old'][r] for r in d['new'] if r in d['old'])))
if 'single' in m:
  print("scaling old %.3f new %.3f" % (m['old']/2/m['single'], m['new']/2/m['single']))
PY
