#!/usr/bin/env bash
# Quick start, main job: set up .venv if needed, then compile ResNet-18 with torch.compile(backend="fxc").
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec .venv/bin/python examples/resnet18.py "$@"
