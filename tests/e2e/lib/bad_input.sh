# Shared by the e2e scripts (sourced; not a test itself): a bad input must exit
# 2 with exactly one "ddpbench: error:" line containing the expected text, and
# leave the results file as it was. Needs BIN, COMMON (array), TMP and fail().
#   snapshot_results                       # after the good runs
#   bad_input STRATEGY 'expected text' --flag=value ...
snapshot_results() { cp "$TMP/r.csv" "$TMP/before.csv"; }
unchanged() { cmp -s "$TMP/r.csv" "$TMP/before.csv" || fail "$1: results file changed"; }
bad_input() {
  local strategy="$1" expect="$2"; shift 2
  local out rc
  set +e; out="$(timeout 60 "$BIN" --strategy="$strategy" "${COMMON[@]}" --steps=2 "$@" --out="$TMP/r.csv" 2>&1 </dev/null)"; rc=$?; set -e
  [[ $rc -eq 2 ]] || fail "$* exited $rc (want 2): $out"
  [[ $(grep -c "ddpbench: error:" <<<"$out") -eq 1 ]] || fail "$*: want exactly one error line: $out"
  grep -q "ddpbench: error: .*$expect" <<<"$out" || fail "$*: message lacks '$expect': $out"
  unchanged "$*"
}
