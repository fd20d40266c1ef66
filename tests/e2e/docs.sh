#!/usr/bin/env bash
# The docs cannot drift from the program: every ```sh block of README.md and
# docs/*.md runs at small size on CPU (the rule: tests/e2e/lib/doc_commands.py,
# docs/testing.md).
set -euo pipefail
BIN="$1"; SRC="$2"
PY="$SRC/.venv/bin/python"; [[ -x "$PY" ]] || PY=python3
exec "$PY" "$SRC/tests/e2e/lib/doc_commands.py" "$BIN" "$SRC"
