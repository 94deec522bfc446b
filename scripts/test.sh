#!/usr/bin/env bash
# The test command: set up (idempotent), check generated code, lint, type-check, run every test
# (Docker tests included). Extra arguments go to pytest, e.g. scripts/test.sh -k tunnel
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
echo "==> generated protobuf code is up to date" >&2
.venv/bin/python scripts/gen_protos.py --check
echo "==> ruff" >&2
.venv/bin/ruff check .
.venv/bin/ruff format --check .
echo "==> mypy (strict)" >&2
.venv/bin/mypy
echo "==> pytest" >&2
exec .venv/bin/pytest "$@"
