#!/usr/bin/env bash
# The documentation site (MkDocs + Material, the API reference from the docstrings by mkdocstrings), in a venv
# of its own (.venv-docs, pinned by docs/requirements.txt) so that the docs tools never touch .venv.
#
#   bash scripts/docs.sh           build it and serve it on http://127.0.0.1:8001/, rebuilt as files change
#   bash scripts/docs.sh build     build it into site/ with --strict: a broken link, a missing page or a public name
#                                  that no longer exists is an error (CI runs this)
#   bash scripts/docs.sh install   only make .venv-docs (CI does this beside the package's own install)
set -euo pipefail
export NO_MKDOCS_2_WARNING=1  # Material's notice about its successor, on every build
cd "$(dirname "$0")/.."
case "${1:-serve}" in
  serve|build|install) ;;
  *) echo "usage: scripts/docs.sh [serve|build|install]" >&2; exit 2 ;;
esac
if [ ! -x .venv-docs/bin/mkdocs ] || ! cmp -s docs/requirements.txt .venv-docs/requirements.txt; then
  python3 -m venv .venv-docs
  .venv-docs/bin/python -m pip install -q -r docs/requirements.txt
  cp docs/requirements.txt .venv-docs/requirements.txt
fi
if [ "${1:-serve}" = install ]; then
  exit 0
fi
if [ "${1:-serve}" = build ]; then
  exec .venv-docs/bin/mkdocs build --strict
fi
exec .venv-docs/bin/mkdocs serve --strict --dev-addr 127.0.0.1:8001
