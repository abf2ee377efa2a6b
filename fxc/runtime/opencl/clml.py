"""CLML (Qualcomm's Adreno OpenCL ML SDK) on fxc's OpenCL context, queue and buffers, through a C shim that is
compiled on the user's machine against the SDK they installed; and the runtime fallback to fxc's own kernels.

    plan = choose(plan, device, source)    # the launches a module runs: each "clml:region" step, or fxc's
                                           # kernels after it (its fallback), whichever the device supports
    run(queue, call, operands)             # one "clml:region" step (operands: [(buffer, byte offset)])

A region step's call is (how many launches follow it as its fallback, its region graph's index in the program
text); its region graph (fxc/backends/external/clml/codegen.py, docs/byoc.md) rides in the program text as a
comment `/* clml:region <index> ... */`, so it travels with the module through the cache and export.

CLML runs where all three hold; otherwise the module runs fxc's kernels and says why, once per reason and process:
- the device lists `cl_qcom_ml_ops` in its extensions (Adreno GPUs with Qualcomm's driver);
- FXC_CLML_SDK names the SDK folder holding include/CL/cl_qcom_ml_ops.h (as TVM's USE_CLML=/path);
- the shim (clml_shim.c, fxc's own code calling the SDK's documented API names; Qualcomm's header is not part of
  fxc and is never copied) compiles against that header with the C compiler ($CC, else cc), once per header and
  shim (kept in the cache folder).
The shim has not been compiled or run here: this host has no Adreno device and no SDK.
"""
from __future__ import annotations

import ctypes
import dataclasses
import hashlib
import json
import os
import re
import subprocess
import tempfile
import warnings
from pathlib import Path

from ...errors import ExecutionError
from ..store import cache_dir

EXTENSION = "cl_qcom_ml_ops"
HEADER = Path("include") / "CL" / "cl_qcom_ml_ops.h"
SHIM = Path(__file__).with_name("clml_shim.c")
KERNEL = "clml:region"
_warned: set = set()
_shims: dict = {}
_graphs: dict = {}              # (queue pointer, program digest, region index) -> the shim's graph handle
DTYPE = {"float32": 0, "float16": 1}
OPS = {"convolution": 0, "transposed_convolution": 1, "fully_connected": 2, "batch_matmul": 3, "batchnorm": 4,
       "binary": 5, "activation": 6, "pad": 7, "concat": 8, "softmax": 9, "reshape": 10, "pool": 11,
       "global_pool": 12, "depth_to_space": 13, "resize_bilinear": 14}
SLOTS = {"convolution": ("input", "weight", "bias", "bn_scale", "bn_shift"),     # an op's inputs in the shim's
          "transposed_convolution": ("input", "weight", "bias", "bn_scale", "bn_shift"),   # order (-1: absent)
          "fully_connected": ("input", "weight", "bias"), "batch_matmul": ("input", "weight"),
          "batchnorm": ("input", "scale", "shift"), "binary": ("a", "b")}
MODES = {"convolution": 0, "depthwise": 1, "relu": 1, "relu6": 2, "clip": 3, "add": 0, "sub": 1, "mul": 2,
         "div": 3, "max": 4, "min": 5, "average": 1, "align_corners": 0, "half_pixel": 1}


def check() -> None:
    """Loading a module that calls CLML needs nothing installed: without the SDK or the extension its regions run
    as fxc's kernels (choose)."""


def region_graphs(source: str) -> list:
    """The region graphs a program text carries, in index order."""
    found = re.findall(r"/\* clml:region (\d+)\n(.*?)\n\*/", source, re.S)
    return [json.loads(text) for _, text in sorted(found, key=lambda f: int(f[0]))]


def missing(device) -> str | None:
    """What keeps CLML from running on this device here (the missing piece, named), or None."""
    info = getattr(device, "info", {}) or {}
    if EXTENSION not in info.get("extensions", ()):
        return (f"the OpenCL device {info.get('name', '?')!r} has no {EXTENSION} extension (CLML runs on Qualcomm "
                f"Adreno GPUs)")
    sdk = os.environ.get("FXC_CLML_SDK", "")
    if not sdk:
        return ("FXC_CLML_SDK is not set: install Qualcomm's Adreno OpenCL ML SDK and set FXC_CLML_SDK to its "
                f"folder (the one holding {HEADER})")
    if not (Path(sdk) / HEADER).is_file():
        return f"FXC_CLML_SDK={sdk} holds no {HEADER}: point it at the Adreno OpenCL ML SDK's folder"
    return None


def shim(sdk: str):
    """The shim built against the SDK's header (once per header and shim source; kept in the cache folder), loaded;
    ExecutionError with the compiler's message when it does not build."""
    header = (Path(sdk) / HEADER).read_bytes()
    key = hashlib.sha256(header + SHIM.read_bytes()).hexdigest()[:16]
    if key in _shims:
        return _shims[key]
    out = cache_dir() / "clml" / f"shim-{key}.so"
    if not out.is_file():
        out.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=out.parent) as tmp:
            so = Path(tmp) / "shim.so"
            cmd = [os.environ.get("CC", "cc"), "-shared", "-fPIC", "-O2", f"-I{Path(sdk) / 'include'}", str(SHIM),
                   "-o", str(so), "-lOpenCL"]
            r = subprocess.run(cmd, capture_output=True, text=True)
            if r.returncode:
                raise ExecutionError(f"the CLML shim did not build against {Path(sdk) / HEADER}:\n{r.stderr[-2000:]}")
            os.replace(so, out)         # (atomic: another process sees the whole library or none)
    lib = ctypes.CDLL(str(out))
    lib.fxc_clml_new.restype = ctypes.c_void_p
    lib.fxc_clml_new.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.POINTER(ctypes.c_int)]
    lib.fxc_clml_tensor.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.POINTER(ctypes.c_int), ctypes.c_int]
    lib.fxc_clml_op.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.POINTER(ctypes.c_int), ctypes.c_int,
                                ctypes.POINTER(ctypes.c_float)]
    lib.fxc_clml_bind.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    lib.fxc_clml_finish.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
    lib.fxc_clml_finish.restype = ctypes.c_int
    lib.fxc_clml_run.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
    _shims[key] = lib
    return lib


def _ints(xs) -> ctypes.Array:
    return (ctypes.c_int * max(len(xs), 1))(*xs)


def _compile(lib, device, graph: dict):
    """The shim's graph of a region graph: its tensors (NCHW, padded to 4 dims; the step's operands first, in
    order) and ops, created on the device's context (the operands' buffers are bound per call by run). An op is
    (kind, ints: output, input count, inputs (SLOTS order, -1 absent), mode, activation, groups, axis, block,
    transpose, padding t l b r, stride h w, dilation h w, window h w, pad widths; floats: clip lo, hi, pad
    value)."""
    status = ctypes.c_int(0)
    g = lib.fxc_clml_new(device.ctx.int_ptr, device.dev.int_ptr, ctypes.byref(status))
    if not g:
        raise ExecutionError(f"CLML refused the device (status {status.value}): its interface version is not one "
                             f"the shim knows")
    ids = {}
    for name, spec in graph["tensors"].items():
        dims = [1] * (4 - len(spec["shape"])) + list(spec["shape"])
        ids[name] = lib.fxc_clml_tensor(g, DTYPE[spec["dtype"]], _ints(dims),
                                        1 if name.startswith("in") else 2 if name.startswith("out") else 0)
    for node in graph["nodes"]:
        a, named = node["attrs"], node["inputs"]
        ins = [ids[named[k]] if k in named else -1 for k in SLOTS.get(node["op"], sorted(named))]
        ints = [ids[node["output"]], len(ins), *ins, MODES.get(a.get("mode"), 0), MODES.get(a.get("activation"), 0),
                a.get("groups", 1), a.get("axis", 1), a.get("block", 1), int(a.get("transpose_weight", False)),
                *a.get("padding", [0] * 4), *a.get("stride", [1, 1]), *a.get("dilation", [1, 1]),
                *a.get("window", [1, 1]),
                *[w for pair in [[0, 0]] * (4 - len(a.get("widths", [[0, 0]] * 4))) + a.get("widths", [])
                  for w in pair]]
        floats = [a.get("lo", 0.0), a.get("hi", 0.0), a.get("value", 0.0)]
        rc = lib.fxc_clml_op(g, OPS[node["op"]], _ints(ints), len(ints), (ctypes.c_float * 3)(*floats))
        if rc:
            raise ExecutionError(f"CLML refused {node['op']} ({node['fxc']}): status {rc}")
    rc = lib.fxc_clml_finish(g, device.queue.int_ptr)     # (memory for its own tensors, the tuning cache)
    if rc:
        raise ExecutionError(f"CLML could not allocate a region's tensors (status {rc})")
    return g


def choose(plan: list, device, source: str) -> list:
    """The launches to run: with CLML usable here, each region step without its fallback launches; else fxc's
    kernels without the region steps (a warning naming the missing piece, once per piece and process)."""
    if not any(st.kernel == KERNEL for st in plan):
        return plan
    why = missing(device)
    if why is None:
        try:
            lib = shim(os.environ["FXC_CLML_SDK"])
            digest = int(hashlib.sha256(source.encode()).hexdigest()[:12], 16)
            for k, graph in enumerate(region_graphs(source)):
                key = (device.queue.int_ptr, digest, k)
                if key not in _graphs:
                    _graphs[key] = (lib, _compile(lib, device, graph))
        except ExecutionError as e:
            why = str(e)
    if why is not None:
        if why not in _warned:
            _warned.add(why)
            warnings.warn(f"fxc: CLML regions run as fxc's OpenCL kernels (correct, on the same device): {why}",
                          RuntimeWarning, stacklevel=3)
        return [st for st in plan if st.kernel != KERNEL]
    out, skip = [], 0
    for st in plan:
        if skip:
            skip -= 1
        elif st.kernel == KERNEL:
            out.append(dataclasses.replace(st, call=st.call + (digest,)))
            skip = st.call[0]
        else:
            out.append(st)
    return out


def run(queue, call: tuple, operands: list, event: bool = False) -> None:
    """Run one region on the queue: bind the step's buffers (at their offsets) to its operand tensors, enqueue its
    ops (the shim copies between fxc's NCHW buffers and CLML's tensors). No event: a profile shows the region as
    the time between its neighbours."""
    lib, g = _graphs[(queue.int_ptr, call[2], call[1])]
    for k, (buf, off) in enumerate(operands):
        rc = lib.fxc_clml_bind(g, k, buf.int_ptr, off, 0)
        if rc:
            raise ExecutionError(f"CLML could not view operand {k} of a region in fxc's buffer at byte {off} "
                                 f"(status {rc}: the device's base address alignment); build for 'opencl'")
    rc = lib.fxc_clml_run(g, queue.int_ptr)
    if rc:
        raise ExecutionError(f"CLML failed running a region (status {rc}); build for 'opencl' to run fxc's kernels")
    return None
