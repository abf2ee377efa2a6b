"""Measured capabilities of the host CPU that no feature flag tells: how fast vdpbf16ps is next to an FMA.

AVX-512 BF16's vdpbf16ps does 32 multiply-adds (16 lanes x a bf16 pair) per instruction, an FMA 16; whether
that doubles the arithmetic rate depends on the core: measured here, an Emerald Rapids core issues one
vdpbf16ps per ~2 cycles but two FMAs per cycle (bf16 at half the fp32 rate), while Zen 4/5 issue both at the
same rate (bf16 at twice the fp32 rate). `bf16_dot_gain` runs both in a tiny compiled loop (24
independent accumulators, interleaved runs, minimum of each) and keeps the answer per CPU in the cache dir.
"""
from __future__ import annotations

import ctypes
import functools
import hashlib
import json
import time

from ...runtime.store import atomic_write, cache_dir
from .compile import build_library, target_machine


def _loop(name: str, dot: bool, nacc: int = 24) -> str:
    """acc[k] = step(acc[k], acc[k+1]) for n iterations: nacc independent chains, throughput-bound."""
    v, w = "<16 x float>", "<32 x bfloat>"
    lines = [f"define void @{name}(ptr %acc, i64 %n) {{", "entry:"]
    for k in range(nacc):
        lines += [f"  %p{k} = getelementptr {v}, ptr %acc, i64 {k}", f"  %a{k}_0 = load {v}, ptr %p{k}, align 4"]
    lines += ["  br label %loop", "loop:", "  %i = phi i64 [0, %entry], [%inext, %loop]"]
    lines += [f"  %a{k} = phi {v} [%a{k}_0, %entry], [%b{k}, %loop]" for k in range(nacc)]
    for k in range(nacc):
        src = f"%a{(k + 1) % nacc}"
        if dot:
            lines += [f"  %x{k} = bitcast {v} {src} to {w}",
                      f"  %b{k} = call {v} @llvm.x86.avx512bf16.dpbf16ps.512({v} %a{k}, {w} %x{k}, {w} %x{k})"]
        else:
            lines.append(f"  %b{k} = call {v} @llvm.fma.v16f32({v} {src}, {v} {src}, {v} %a{k})")
    lines += ["  %inext = add i64 %i, 1", "  %c = icmp slt i64 %inext, %n", "  br i1 %c, label %loop, label %exit",
              "exit:"] + [f"  store {v} %b{k}, ptr %p{k}, align 4" for k in range(nacc)] + ["  ret void", "}"]
    return "\n".join(lines)


def _measure() -> float:
    tm, triple, _, _ = target_machine()
    ir = "\n".join([f'target triple = "{triple}"', f'target datalayout = "{tm.target_data}"',
                    "declare <16 x float> @llvm.fma.v16f32(<16 x float>, <16 x float>, <16 x float>)",
                    "declare <16 x float> @llvm.x86.avx512bf16.dpbf16ps.512("
                    "<16 x float>, <32 x bfloat>, <32 x bfloat>)",
                    _loop("fxc_probe_fma", False), _loop("fxc_probe_dot", True)])
    lib = ctypes.CDLL(str(build_library(ir)[0]))
    fma, dot = lib.fxc_probe_fma, lib.fxc_probe_dot
    for f in (fma, dot):
        f.restype, f.argtypes = None, [ctypes.c_void_p, ctypes.c_int64]
    acc = (ctypes.c_float * (24 * 16))(*([1e-3] * (24 * 16)))
    best = [float("inf"), float("inf")]
    for _ in range(5):
        for k, f in enumerate((fma, dot)):
            t0 = time.perf_counter()
            f(ctypes.addressof(acc), 20000)
            best[k] = min(best[k], time.perf_counter() - t0)
    return 2 * best[0] / best[1]       # a vdpbf16ps does 2x the multiply-adds of an FMA


@functools.lru_cache(maxsize=None)
def bf16_dot_gain() -> float:
    """Multiply-adds per second of vdpbf16ps over those of float32 FMAs on this CPU (0.0 without AVX-512 BF16)."""
    _, _, cpu, features = target_machine()
    if "+avx512bf16" not in features.split(","):
        return 0.0
    path = cache_dir() / f"probe-bf16-{hashlib.sha256((cpu + features).encode()).hexdigest()[:16]}.json"
    try:
        return float(json.loads(path.read_text())["bf16_dot_gain"])
    except (OSError, ValueError, KeyError):
        pass
    gain = _measure()
    try:
        atomic_write(path, json.dumps({"cpu": cpu, "bf16_dot_gain": gain}).encode())
    except OSError:
        pass
    return gain
