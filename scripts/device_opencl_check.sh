#!/usr/bin/env bash
# The opencl target on a lent GPU machine (the `device` tool): pyopencl from carried wheels (.whl), NVIDIA's
# OpenCL driver registered with the ICD loader, then the OpenCL op sample and a few timings. Prints what failed.
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
  || { echo "pyopencl wheels did not install"; exit 1; }
export PYTHONPATH=/tmp/site:$PWD FXC_CACHE_DIR=/tmp/fxc-cache PYTHONUNBUFFERED=1
lib=$(ldconfig -p | awk '/libnvidia-opencl\.so/{print $NF; exit}')
[ -z "$lib" ] && lib=$(find / -name 'libnvidia-opencl.so*' 2>/dev/null | head -1)
echo "NVIDIA OpenCL library: ${lib:-none}"
mkdir -p /tmp/icd && [ -n "$lib" ] && echo "$lib" > /tmp/icd/nvidia.icd
export OCL_ICD_VENDORS=/tmp/icd
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
python3 - <<'PY'
import pyopencl as cl
for p in cl.get_platforms():
    for d in p.get_devices():
        print("device:", p.name, "|", d.name, "|", d.version, "| driver", d.driver_version, "| CUs", d.max_compute_units,
              "| local", d.local_mem_size, "| wg", d.max_work_group_size)
PY
timeout 420 python3 -m pytest tests/test_opencl.py -q -n 0 -p no:cacheprovider -k "op_sample or fixture or tree or profile or torch_compile" \
  2>&1 | tail -25
python3 - <<'PY'
import time, numpy as np
from fxc.relay_like.builder import Builder
from fxc.build import build
for (m, k, n) in ((512, 512, 512), (1024, 1024, 1024)):
    b = Builder(); x = b.graph.input((m, k), "float32"); w = b.graph.input((k, n), "float32")
    b.graph.outputs = [b.call("matmul", [x, w])]
    mod = build(b.graph, target="opencl")
    a, c = np.random.rand(m, k).astype(np.float32), np.random.rand(k, n).astype(np.float32)
    out = mod(a, c); mod(a, c)
    t = time.perf_counter(); r = 5
    for _ in range(r): mod(a, c)
    dt = (time.perf_counter() - t) / r
    print(f"matmul {m}x{k}x{n}: {dt*1e3:.2f} ms/call incl. copies, {2*m*k*n/dt/1e9:.1f} GFLOP/s, max err",
          float(np.abs(out - a @ c).max()))
PY
