# Shared by the e2e scripts (sourced; not a test itself): snapshot rank files
# that must hold the same tensors, bit for bit, are listed as the test goes and
# compared all at once at its end by same_tensors.py (one torch import, which
# costs seconds, instead of one per pair). Needs PY, SRC, TMP and fail().
#   same_tensors_later 'what differs if they do' A.pt B.pt
#   check_same_tensors 'what failed' [--ignore=KEY ...]
same_tensors_later() { printf '%s\t%s\t%s\n' "$1" "$2" "$3" >> "$TMP/pairs.tsv"; }
check_same_tensors() {
  "$PY" "$SRC/tests/e2e/lib/same_tensors.py" --pairs="$TMP/pairs.tsv" "${@:2}" || fail "$1"
}
