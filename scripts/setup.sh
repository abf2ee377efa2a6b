#!/usr/bin/env bash
# Creates .venv at the repo root and installs what fxc needs; idempotent and quiet when done already.
# As root it also installs the Debian packages the targets need: gcc (the CPU target) and PoCL with the OpenCL ICD
# loader (the opencl target; pip's PoCL wheel fails on these CPUs: "unknown target CPU generic"), and Mesa's EGL
# and GL drivers (the opengl target: libegl-mesa0 libgl1-mesa-dri, llvmpipe; moderngl from requirements.txt), and
# Chromium (the webgl and wasm targets, driven by pip's playwright from requirements.txt) and lld (wasm-ld: the wasm
# target's linker).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
py=${PYTHON:-python3.11}
command -v "$py" >/dev/null || py=python3
stamp=.venv/.fxc-setup-$(cat requirements.txt pyproject.toml scripts/setup.sh | sha256sum | cut -c1-16)
if [ ! -f "$stamp" ]; then
  if [ "$(id -u)" = 0 ]; then
    # gcc links the kernels; g++ builds fxc's MXNet extension (fxc/capture/mxnet/mxnet_fxc.cc); PoCL runs the opencl target
    need=""
    command -v gcc >/dev/null || need="gcc"
    command -v g++ >/dev/null || need="$need g++"
    [ -f /etc/OpenCL/vendors/pocl.icd ] || need="$need pocl-opencl-icd ocl-icd-libopencl1"
    # the opengl target: Mesa's headless EGL and its GL drivers (llvmpipe without a GPU)
    for p in libegl1 libegl-mesa0 libgl1-mesa-dri; do dpkg -s "$p" >/dev/null 2>&1 || need="$need $p"; done
    # the webgl target: Debian's Chromium (Playwright drives it; `playwright install` is never run)
    for p in chromium fonts-liberation; do dpkg -s "$p" >/dev/null 2>&1 || need="$need $p"; done
    # the wasm target: wasm-ld (Debian's lld) links the kernels into one .wasm module; the browser above runs it
    command -v wasm-ld >/dev/null || need="$need lld"
    # ARM cross-compilation (llvm -mtriple=aarch64-linux-gnu / armv7l-linux-gnueabihf): the cross compilers and their
    # C libraries link the kernels and the thread pool; qemu-user runs the cross-built programs in the tests
    for p in gcc-aarch64-linux-gnu libc6-dev-arm64-cross binutils-aarch64-linux-gnu gcc-arm-linux-gnueabihf \
             libc6-dev-armhf-cross qemu-user; do dpkg -s "$p" >/dev/null 2>&1 || need="$need $p"; done
    # the opencl target's external library (-libs=clblast: fxc/backends/external/clblast, called through ctypes)
    dpkg -s libclblast1 >/dev/null 2>&1 || need="$need libclblast1"
    # the llvm target's external library (-libs=dnnl: oneDNN's C API through ctypes; -dev links exported C artifacts)
    for p in libdnnl2 libdnnl-dev; do dpkg -s "$p" >/dev/null 2>&1 || need="$need $p"; done
    # fxc.explain's picture of the fused graph and `fxc inspect --graph` (graphviz's dot lays it out)
    command -v dot >/dev/null || need="$need graphviz"
    if [ -n "$need" ]; then
      apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $need >/dev/null
    fi
  fi
  [ -x .venv/bin/python ] || "$py" -m venv .venv
  .venv/bin/pip install -q --upgrade pip
  .venv/bin/pip install -q -r requirements.txt
  .venv/bin/pip install -q --no-deps -e .
  .venv/bin/pip install -q "pyopencl>=2026.1"     # the fxc[opencl] extra: the opencl target's device API
  rm -f .venv/.fxc-setup-*
  touch "$stamp"
fi
# fxc's modules as bytecode, as a regular (non-editable) install has them: where PYTHONDONTWRITEBYTECODE is set,
# every fresh process would otherwise compile fxc's sources again (~0.2 s of each cold torch.compile here).
# Quick when they are current.
.venv/bin/python -m compileall -q fxc >/dev/null
# the thread-pool runtime's object file beside its source, as a wheel would ship it (a first compile in a fresh
# cache then skips gcc on it); quick when it is there
ls fxc/runtime/cpu/_prebuilt/cpu_parallel-*.o >/dev/null 2>&1 && [ -z "$(find fxc/runtime/cpu/cpu_parallel.c -newer fxc/runtime/cpu/_prebuilt -print)" ] \
  || .venv/bin/python -c "from fxc.backends.llvm.compile import prebuild_runtime; prebuild_runtime()"
# fxc's MXNet extension (the partitioner behind optimize_for(backend="fxc")) beside its source, as a wheel would ship
# it: no first `import fxc.mxnet` then waits for g++; quick when it is there
ls fxc/capture/mxnet/_prebuilt/libfxc_mxnet-*.so >/dev/null 2>&1 && [ -z "$(find fxc/capture/mxnet/mxnet_fxc.cc -newer fxc/capture/mxnet/_prebuilt -print)" ] \
  || .venv/bin/python -c "from fxc.capture.mxnet.extension import prebuild_extension; prebuild_extension()"
# the torch.compile backend's per-call weight check (fxc/capture/torch/weight_check.cpp, built against the installed
# torch) beside its source: no first torch.compile then checks its weights in Python while g++ runs (~15 s of CPU)
ls fxc/capture/torch/_prebuilt/weight_check-*.so >/dev/null 2>&1 && [ -z "$(find fxc/capture/torch/weight_check.cpp -newer fxc/capture/torch/_prebuilt -print)" ] \
  || .venv/bin/python -c "from fxc.capture.torch.weights import prebuild; prebuild()"
