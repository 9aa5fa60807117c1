#!/usr/bin/env bash
# Sets up .venv with the test dependencies, type-checks src/ (mypy --strict, configured in pyproject.toml) and runs
# the whole test suite (browser tests need Debian's chromium: apt-get install chromium).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
mkdir -p artifacts
.venv/bin/python -m mypy
exec .venv/bin/python -m pytest "$@"
