#!/usr/bin/env bash
# Benchmarks: set up .venv (scripts/setup.sh), install the peers (requirements-bench.txt) once, then run
# the harness; arguments go to it, e.g.  bash scripts/bench.sh --quick --models resnet18 --peers eager,fxc
# torch and numpy are held at requirements.txt's versions (pip constraints), never upgraded by a peer.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
bash scripts/setup.sh
stamp=.venv/.fxc-bench-$(cat requirements.txt requirements-bench.txt scripts/bench.sh | sha256sum | cut -c1-16)
if [ ! -f "$stamp" ]; then
  if [ "$(id -u)" = 0 ] && [ ! -f /usr/include/clblast.h ]; then     # pyclblast builds against CLBlast
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq libclblast-dev >/dev/null
  fi
  constraints=$(mktemp)
  trap 'rm -f "$constraints"' EXIT
  grep -E '^(torch|numpy)==' requirements.txt > "$constraints"
  .venv/bin/pip install -q -c "$constraints" -r requirements-bench.txt
  while read -r pin; do    # a peer must never have replaced torch or numpy
    .venv/bin/python - "$pin" <<'PY'
import sys, importlib.metadata as md
name, want = sys.argv[1].split("==")
have = md.version(name)
if have.split("+")[0] != want:
    sys.exit(f"bench.sh: {name} is {have}, requirements.txt pins {want}")
PY
  done < "$constraints"
  rm -f .venv/.fxc-bench-*
  touch "$stamp"
fi
exec .venv/bin/python -m benchmarks.run "$@"
