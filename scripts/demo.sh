#!/usr/bin/env bash
# The main job: set up (idempotent), then run a control plane, enroll an edge, and run tool calls
# end to end in a Docker sandbox, printing what happens.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec .venv/bin/python scripts/demo.py "$@"
