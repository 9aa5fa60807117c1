#!/usr/bin/env bash
# Sets up .venv with the test dependencies (scripts/setup.sh), type-checks src/ (mypy --strict, configured in
# pyproject.toml), runs the tests and says how long it took.
#
#   bash scripts/test.sh           the quick set, before every commit: every test but the slow, browser and
#                                  PostgreSQL ones (-m "not slow and not browser and not postgres")
#   bash scripts/test.sh --all     the whole suite: real books, the browser (apt-get install chromium), PostgreSQL,
#                                  soaks, training, the real model's long runs; what CI (.ci/run) runs
#
# Other arguments go to pytest (bash scripts/test.sh tests/test_cli_careful.py -x). Ctrl-C stops the run and every
# server and database it started (tests/conftest.py).
#
# Two pytest workers (pytest-xdist, a file each at a time so a module's fixtures are built once): most tests wait on
# a process, a socket or a deadline rather than a CPU, so two halve the run even on two cores (the quick set: 4 min
# 52 s -> 2 min 43 s, docs/BENCHMARKS.md). CHAPTERVERSE_TEST_WORKERS=0 runs them in this one process.
set -euo pipefail
cd "$(dirname "$0")/.."
selection=(-m "not slow and not browser and not postgres")
if [ "${1:-}" = "--all" ]; then
  shift
  selection=()
fi
# The run relies on cached bytecode: without it pytest rewrites every test module's asserts again on each run
# and each chapterverse process the tests start compiles the package again.
unset PYTHONDONTWRITEBYTECODE
export CHAPTERVERSE_TEST_STARTED="${CHAPTERVERSE_TEST_STARTED:-$(date +%s)}"  # tests/conftest.py says how long it took
bash scripts/setup.sh
mkdir -p artifacts
.venv/bin/python -m mypy
exec .venv/bin/python -m pytest -n "${CHAPTERVERSE_TEST_WORKERS:-2}" --dist loadfile "${selection[@]}" "$@"  # exec: Ctrl-C and SIGTERM reach pytest itself
