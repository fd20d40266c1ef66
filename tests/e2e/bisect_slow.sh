#!/usr/bin/env bash
# scripts/bisect_slow.py on a throw-away repository of 6 commits whose 4th plants a
# slowdown: the "build" copies a fake ddpbench (a script writing one row whose
# throughput is 100 img/s with a little jitter, 10% less from the planted
# commit on), so the bisection, its interleaved rounds and its verdict are
# checked in seconds without compiling. Then its bad inputs: an unknown
# commit, a dirty tree, GOOD not an ancestor of BAD, an unknown entry: one
# line each, exit 2. (A real bisection is recorded in results/cpu-2core/nightly/.)
set -euo pipefail
SRC="$2"
TMP="$(mktemp -d)"
trap 'rm -rf "$TMP"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
PY="$SRC/.venv/bin/python"; [[ -x "$PY" ]] || PY=python3
REPO="$TMP/repo"
mkdir -p "$REPO" && cd "$REPO"
git init -q -b main && git config user.email t@t && git config user.name t
cat >fake_ddpbench.sh <<'FAKE'
#!/usr/bin/env bash
# Writes one ddpbench-like row: throughput 100 x (1 - slowdown of this commit), +-1% jitter.
out=""; for a in "$@"; do [[ $a == --out=* ]] && out="${a#--out=}"; done
slow=0
awk -v s="$slow" -v j="$RANDOM" 'BEGIN { printf "throughput_img_s\n%.3f\n", 100 * (1 - s) * (0.99 + 0.02 * j / 32767) }' >"$out"
FAKE
chmod +x fake_ddpbench.sh
printf '[[run]]\nname = "ddp-2x1"\nstrategy = "ddp"\ngpus = 2\n' >matrix.toml
git add . && git commit -qm "c1 good"
for i in 2 3 4 5 6; do
  [[ $i == 4 ]] && sed -i 's/^slow=0$/slow=0.10/' fake_ddpbench.sh
  echo "$i" >>notes && git add . && git commit -qm "c$i$([[ $i == 4 ]] && echo ' planted slowdown')"
done
GOOD="$(git rev-parse HEAD~5)"; BAD="$(git rev-parse HEAD)"; PLANTED="$(git rev-parse --short HEAD~2)"
BUILD=(--build='mkdir -p build && cp fake_ddpbench.sh build/ddpbench' --matrix=matrix.toml --drop=0.1 --rounds=3)
bisect() { PYTHONPATH="$SRC/scripts" "$PY" "$SRC/scripts/bisect_slow.py" "$@"; }

bisect ddp-2x1 "$GOOD" "$BAD" "${BUILD[@]}" >"$TMP/out" 2>&1 || fail "bisect: $(cat "$TMP/out")"
cat "$TMP/out"
grep -q "^first slow commit: $PLANTED c4 planted slowdown: 0\.[89][0-9]* of GOOD's median throughput (confidence" "$TMP/out" \
  || fail "planted commit not named: $(cat "$TMP/out")"
[[ $(grep -c "rounds (.*, .*, .*)" "$TMP/out") -ge 3 ]] || fail "each probe lists its 3 rounds: $(cat "$TMP/out")"
[[ -d "$TMP/repo-bisect" ]] || fail "no worktree beside the checkout"
# No slowdown between two good commits: nothing named, exit 1.
set +e; bisect ddp-2x1 "$GOOD" HEAD~3 "${BUILD[@]}" >"$TMP/none" 2>&1; rc=$?; set -e
[[ $rc -eq 1 ]] && grep -q "is not slower than GOOD" "$TMP/none" || fail "no slowdown: exit $rc: $(cat "$TMP/none")"

expect_bad() {  # 'message' args...
  local want="$1"; shift
  set +e; out="$(bisect "$@" "${BUILD[@]}" 2>&1)"; rc=$?; set -e
  [[ $rc -eq 2 ]] || fail "$*: exit $rc (want 2): $out"
  [[ $(wc -l <<<"$out") -eq 1 ]] || fail "$*: want one line: $out"
  grep -q "^bisect: .*$want" <<<"$out" || fail "$*: message lacks '$want': $out"
}
expect_bad "nosuch: not a commit of" ddp-2x1 nosuch "$BAD"
expect_bad "is not an ancestor of BAD" ddp-2x1 "$BAD" "$GOOD"
expect_bad "no such entry in matrix.toml (entries: ddp-2x1)" zero3-2x1 "$GOOD" "$BAD"
echo dirty >>notes
expect_bad "uncommitted changes" ddp-2x1 "$GOOD" "$BAD"
echo "bisect: all checks passed"
