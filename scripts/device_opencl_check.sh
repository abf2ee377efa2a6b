#!/usr/bin/env bash
# The opencl target on a lent GPU machine (the `device` tool): pyopencl from carried wheels (.whl), NVIDIA's
# OpenCL driver registered with the ICD loader, then the OpenCL op sample and a few timings. Prints what failed.
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
  || { echo "pyopencl wheels did not install"; exit 1; }
export PYTHONPATH=/tmp/site:$PWD FXC_CACHE_DIR=/tmp/fxc-cache PYTHONUNBUFFERED=1
# fxc's torch.compile entry point (pyproject's [project.entry-points]) without a pip install of the checkout
mkdir -p /tmp/site/fxc-0.1.0.dist-info
printf 'Metadata-Version: 2.1\nName: fxc\nVersion: 0.1.0\n' > /tmp/site/fxc-0.1.0.dist-info/METADATA
printf '[torch_dynamo_backends]\nfxc = fxc.capture.torch.backend:fxc_backend\n' > /tmp/site/fxc-0.1.0.dist-info/entry_points.txt
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
timeout 360 python3 -m pytest tests/backends/opencl/test_opencl.py -o addopts="" -q -n 0 -p no:cacheprovider -k "op_sample or fixture or tree or profile or torch_compile or reference_models or out_of_range or export" \
  2>&1 | grep -E "passed|failed|FAILED|Error" | tail -30
python3 - <<'PY'
import time, numpy as np
from fxc.relay_like.builder import Builder
from fxc.driver.build import build
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
# the three reference models through fxc.from_torch on the OpenCL device (batch 1; copies at the edges included),
# against PyTorch eager on the same GPU (CUDA) for scale
timeout 200 python3 - <<'PY'
import statistics, time, torch, fxc
from fxc.testing.models import example_inputs, make_model
for name in ("resnet18", "mobilenet_v2", "bert"):
    model, ins = make_model(name).eval(), example_inputs(name, batch=1, seq_len=128)
    t0 = time.perf_counter(); m = fxc.from_torch(model, ins, target="opencl"); tc = time.perf_counter() - t0
    def timed(f, n=30):
        f(); ts = []
        for _ in range(n):
            t = time.perf_counter(); f(); ts.append(1e3 * (time.perf_counter() - t))
        return statistics.median(ts), min(ts)
    with torch.no_grad():
        err = (m(*ins) - model(*ins)).abs().max().item()
        fx = timed(lambda: m(*ins))
        gm, gi = model.cuda(), [x.cuda() for x in ins]
        ge = timed(lambda: (gm(*gi), torch.cuda.synchronize()))
    print(f"{name}: fxc opencl {fx[0]:.2f} ms median ({fx[1]:.2f} min), compile {tc:.1f} s, max err {err:.2e}; "
          f"torch eager cuda {ge[0]:.2f} ms ({ge[1]:.2f})")
PY
