#!/usr/bin/env bash
# Sets up .venv with the package alone (no test dependencies), ingests the bundled demo book into a demo library
# and answers a question with citations.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh --product
export CHAPTERVERSE_HOME="${CHAPTERVERSE_HOME:-$PWD/.demo-library}"
.venv/bin/chapterverse ingest src/chapterverse/demo/
.venv/bin/chapterverse ask "${1:-What was in the chest Marta found after the storm?}"
