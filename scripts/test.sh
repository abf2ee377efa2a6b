#!/usr/bin/env bash
# Quick start, tests: set up .venv if needed, then run the whole suite on every target (2 workers).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec .venv/bin/python -m pytest tests -n "${FXC_TEST_WORKERS:-2}" -q "$@"
