#!/usr/bin/env bash
# The CPU-sensitive tests on an emulated x86-64 CPU: qemu-user (Debian `qemu-user`) runs pytest with CPUID of the
# named CPU model, so LLVM, PyTorch and fxc see that CPU as the host (QEMU's TCG has no AVX-512: every model
# runs as at most AVX2). Usage: bash scripts/test_emulated_cpu.sh [QEMU_CPU] [pytest args]
#   bash scripts/test_emulated_cpu.sh Haswell          # a host without AVX-512 (so without AVX-512 BF16)
#   bash scripts/test_emulated_cpu.sh Cascadelake-Server
# One process (no xdist: a child process would start outside the emulator); 10-50x slower than native, so the
# default selection is the tests that depend on the host's ISA: bf16, the target and host checks, Winograd, the
# CPU conv schedules and the registry ops that once failed without AVX-512 BF16.
set -euo pipefail
cd "$(dirname "$0")/.."
cpu="${1:-Haswell}"; shift || true
command -v qemu-x86_64 >/dev/null || { [ "$(id -u)" = 0 ] && DEBIAN_FRONTEND=noninteractive apt-get install -y -q qemu-user >/dev/null; }
command -v qemu-x86_64 >/dev/null || { echo "qemu-x86_64 not found: apt-get install qemu-user" >&2; exit 1; }
bash scripts/setup.sh
export FXC_CACHE_DIR="${FXC_CACHE_DIR:-$(mktemp -d /tmp/fxc-cache-emulated-XXXXXX)}"
if [ $# -eq 0 ]; then
  set -- tests/graph/test_bf16.py tests/backends/llvm/test_targets.py tests/graph/test_winograd.py tests/lowering/test_conv_schedules_cpu.py \
         "tests/ops/test_ops.py::test_op_matches_reference[llvm-conv2d_winograd-4]" \
         "tests/ops/test_ops.py::test_op_matches_reference[llvm-conv2d_winograd-5]" \
         "tests/ops/test_ops.py::test_op_matches_reference[llvm-pack_bf16_pairs-0]"
fi
qemu-x86_64 -cpu "$cpu" .venv/bin/python -c "import llvmlite.binding as l; print('emulated host:', l.get_host_cpu_name())" 2>/dev/null
exec qemu-x86_64 -cpu "$cpu" .venv/bin/python -m pytest -p no:xdist -p no:cacheprovider -rs "$@" 2> >(grep -v "TCG doesn't support" >&2)
