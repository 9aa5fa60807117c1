#!/usr/bin/env bash
# schemathesis over the whole API of a real server started from this tree: every operation of /openapi.json, the
# check that no answer is a 5xx. Not part of CI (it takes minutes); rerun it after changing a route.
#
#   scripts/schemathesis.sh [SECONDS]   time budget of the run (default 540); exit status is schemathesis's
#
# schemathesis (pinned below) lives in its own venv, $SCHEMATHESIS_VENV or /tmp/schemavenv, made on first use: it
# is not a dependency of chapterverse and is never installed into .venv. The server runs on 127.0.0.1 (no API key
# needed there) as it is deployed: the knowledge base on, a library, a knowledge-base folder with one file, the
# scratch folder as its only ingest root (all under a fresh temporary folder removed at the end), and an upstream
# model, the tests' scripted one (tests/fakellm.py, a fixed answer), so the proxy routes do their work instead of
# answering 503 NO_UPSTREAM. The server's log is printed on failure.
set -euo pipefail
cd "$(dirname "$0")/.."
SCHEMATHESIS_VERSION=4.32.5
seconds=${1:-540}
venv=${SCHEMATHESIS_VENV:-/tmp/schemavenv}
PY=${PYTHON:-.venv/bin/python}
if ! "$venv/bin/schemathesis" --version 2>/dev/null | grep -q "$SCHEMATHESIS_VERSION"; then
  python3 -m venv "$venv"
  "$venv/bin/pip" install -q "schemathesis==$SCHEMATHESIS_VERSION"
fi
scratch=$(mktemp -d)
port=$("$PY" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
mkdir -p "$scratch/kb" "$scratch/library"
echo "The refund window is 30 days." > "$scratch/kb/faq.md"
export PYTHONPATH="$PWD/src:$PWD/tests${PYTHONPATH:+:$PYTHONPATH}"
"$PY" -u -c 'import time
from fakellm import FakeLLM, Reply
upstream = FakeLLM(default=Reply.text("The refund window is 30 days.")).start()
print(upstream.base_url, flush=True)
time.sleep(10 ** 9)' > "$scratch/upstream.url" &
upstream=$!
trap 'kill "$upstream" 2>/dev/null; rm -rf "$scratch"' EXIT
until [ -s "$scratch/upstream.url" ]; do sleep 0.2; done
"$PY" -m chapterverse serve --host 127.0.0.1 --port "$port" --library "$scratch/library" --rag_enabled \
  --rag_kb_path "$scratch/kb" --ingest_roots "$scratch" --llm_base_url "$(cat "$scratch/upstream.url")" \
  --llm_model fake-model > "$scratch/server.log" 2>&1 &
server=$!
trap 'kill "$server" "$upstream" 2>/dev/null; wait "$server" "$upstream" 2>/dev/null || true; rm -rf "$scratch"' EXIT
status=0
"$venv/bin/schemathesis" run "http://127.0.0.1:$port/openapi.json" --wait-for-schema 120 \
  --checks not_a_server_error --max-time "$seconds" --workers 1 --request-timeout 30 || status=$?
if [ "$status" -ne 0 ]; then
  echo "--- server log ($scratch/server.log), last 80 lines"; tail -n 80 "$scratch/server.log"
fi
exit "$status"
