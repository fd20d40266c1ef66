#!/bin/bash
# abn.sh OUT ROUNDS -- label1 'cmd1' label2 'cmd2' ...   (each cmd gets --out appended; rounds alternate order)
OUT=$1; ROUNDS=$2; shift 3
labels=(); cmds=()
while (($#)); do labels+=("$1"); cmds+=("$2"); shift 2; done
C="--device=cpu --model=resnet18 --image-size=64 --batch-size=16 --threads-per-device=1 --steps=${STEPS:-20} --warmup=5 --no-eval --progress=off --cpu-malloc=reuse --expected=off"
n=${#labels[@]}
for r in $(seq $ROUNDS); do
  for ((k=0;k<n;k++)); do
    if (( r % 2 )); then i=$k; else i=$((n-1-k)); fi
    rm -f /tmp/ab/run.csv
    if eval "${cmds[i]} $C --out=/tmp/ab/run.csv" > /tmp/ab/log 2>&1; then
      v=$(python3 -c 'import csv,sys; print(list(csv.DictReader(open(sys.argv[1])))[-1]["throughput_img_s"])' /tmp/ab/run.csv)
      echo "$r,${labels[i]},$v" | tee -a $OUT
    else echo "fail ${labels[i]}"; tail -3 /tmp/ab/log; fi
  done
done
python3 - $OUT <<'PY'
import sys,statistics as st
d={}
for l in open(sys.argv[1]):
  r,lab,v=l.strip().split(','); d.setdefault(lab,{})[r]=float(v)
m={l:st.median(v.values()) for l,v in d.items()}
for l in d: print(f"{l:24s} {m[l]:8.2f}  {sorted(d[l].values())}")
labs=list(d)
for a in labs:
  for b in labs:
    if a<b:
      pr=[d[a][r]/d[b][r] for r in d[a] if r in d[b]]
      print(f"{a}/{b}: {m[a]/m[b]:.3f} (per-round median {st.median(pr):.3f})")
PY
