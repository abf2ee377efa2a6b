#!/usr/bin/env bash
# Benchmarks: set up .venv (scripts/setup.sh), install the peers (requirements-bench.txt) once, then run
# the harness; arguments go to it, e.g.  bash scripts/bench.sh --quick --models resnet18 --peers eager,fxc
#   bash scripts/bench.sh --figure3 [--runs 100]     the seed's Figure 3: ResNet-18 on every fxc target
#   bash scripts/bench.sh --browser [--models ...]   fxc's browser targets against TF.js and onnxruntime-web: first
#                                                    `npm ci` of benchmarks/web/package-lock.json (needs node + npm)
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
case "${1:-}" in
  --figure3) shift; exec .venv/bin/python -m benchmarks.figure3 "$@" ;;
  --browser)
    shift
    web=benchmarks/web
    lock=$web/node_modules/.fxc-$(sha256sum "$web/package-lock.json" | cut -c1-16)
    if [ ! -f "$lock" ]; then
      if ! command -v npm >/dev/null; then
        if [ "$(id -u)" = 0 ]; then
          apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nodejs npm >/dev/null
        else
          echo "bench.sh --browser: npm is missing (Debian: apt-get install nodejs npm)" >&2; exit 1
        fi
      fi
      (cd "$web" && npm ci --no-audit --no-fund)
      touch "$lock"
    fi
    exec .venv/bin/python -m benchmarks.browser_peers "$@" ;;
esac
exec .venv/bin/python -m benchmarks.run "$@"
