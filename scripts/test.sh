#!/usr/bin/env bash
# Quick start, tests: set up .venv if needed, lint with ruff, then run the whole suite on every target (2 workers).
# Arguments go to pytest: test paths (default: pyproject.toml's testpaths, i.e. tests/) and options.
# Verbosity comes from pyproject.toml's addopts (-q) alone: a second -q would hide the closing "N passed" line.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
# lint first (pyflakes, pycodestyle, isort; config in pyproject.toml): a failing lint fails the run before the tests
.venv/bin/ruff check .
exec .venv/bin/python -m pytest -n "${FXC_TEST_WORKERS:-2}" "$@"
