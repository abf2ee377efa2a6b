"""Per-layer: every form fxc can give a stride-1 3x3 conv, timed side by side.

    .venv/bin/python -m benchmarks.winograd_layers [--runs 60] [--forms direct,F4,F2,direct-bf16,F2-bf16]
        [--varying] [NxCxKxHxW ...]

Forms: the direct conv2d_packed kernel (`direct`), Winograd F(4x4,3x3) (`F4`) and F(2x2,3x3) (`F2`) in float32,
and with precision="bf16" the bf16 direct kernel (`direct-bf16`) and F(2x2,3x3) over bf16 operands (`F2-bf16`).
Each layer is conv2d(pad 1) + bias + relu (the epilogue fused) over a weight, built once per form (the pass's
choice replaced by the form's) and timed interleaved, one call of each per round on a fixed weight (the weight
transform is a cached prepack step and runs in the first call; with --varying every call packs or transforms the
weight again, as a training step does). Prints the minimum wall time of the calls (the
machine is shared: the minimum is the least disturbed), the direct-conv-equivalent GFLOP/s and the max error
relative to the output scale against the float32 direct kernel, and marks the form fxc picks
(`use_winograd.winograd_tile`; bf16 as on a CPU whose vdpbf16ps runs at twice the FMA rate). Default layers:
ResNet-18's stride-1 3x3 convs at batch 1.
"""
from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

from fxc.driver.build import build
from fxc.relay_like.builder import Builder

RESNET18 = ["1x64x64x56x56", "1x128x128x28x28", "1x256x256x14x14", "1x512x512x7x7"]
FORMS = {"direct": (None, "fp32"), "F4": ((4, False), "fp32"), "F2": ((2, False), "fp32"),
         "direct-bf16": (None, "bf16"), "F2-bf16": ((2, True), "bf16")}


def _pass_module():
    import fxc.relay_like.passes.use_winograd  # noqa: F401  (the package re-exports the function under the name)
    return sys.modules["fxc.relay_like.passes.use_winograd"]


def _layer(n, c, k, h, w, form, varying=False):
    """(call, output) of the layer built in `form`, or None when the form does not apply."""
    choice, precision = FORMS[form]
    uw = _pass_module()
    real = uw.winograd_tile
    uw.winograd_tile = lambda *a, **kw: choice
    try:
        g = Builder().graph
        x = g.input((n, c, h, w), "float32")
        wt = g.input((k, c, 3, 3), "float32")
        bias = g.input((k, 1, 1), "float32")
        g.weights.update({wt.id, bias.id})
        y = g.call1("conv2d", [g.call1("pad", [x], pad=(1, 1, 1, 1), value=0.0, mode="constant"), wt])
        g.outputs = [g.call1("relu", [g.call1("add", [y, bias])])]
        module = build(g, precision=precision, bf16="all")    # bf16 forms in bf16 whatever this CPU's dot rate
    finally:
        uw.winograd_tile = real
    if (choice is not None) != any("conv2d_winograd" in line for line in module.kernels):
        return None
    rng = np.random.default_rng(0)
    args = [rng.standard_normal(s).astype(np.float32) for s in [(n, c, h, w), (k, c, 3, 3), (k, 1, 1)]]
    args[1] *= np.sqrt(2.0 / (c * 9))
    out = np.empty((n, k, h, w), np.float32)
    ptrs = [a.ctypes.data for a in args]
    token = None if varying else tuple((id(a), 0) for a in args)    # None: the weight is packed again every call
    module.run_pointers(ptrs, [out.ctypes.data], token)          # packs (or transforms) the weight

    def call(keep=(args, module)):          # the closure keeps the arrays behind the pointers alive
        t = time.perf_counter()
        module.run_pointers(ptrs, [out.ctypes.data], token)
        return time.perf_counter() - t
    return call, out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("layers", nargs="*", default=RESNET18, help="NxCxKxHxW (padding 1, stride 1)")
    ap.add_argument("--runs", type=int, default=60)
    ap.add_argument("--forms", default=",".join(FORMS), help=f"comma-separated, of {', '.join(FORMS)}")
    ap.add_argument("--varying", action="store_true", help="pack or transform the weight in every call (training)")
    args = ap.parse_args()
    forms = args.forms.split(",")
    unknown = set(forms) - set(FORMS)
    if unknown:
        ap.error(f"unknown form(s) {sorted(unknown)}; known: {', '.join(FORMS)}")
    os.environ.setdefault("FXC_MODULE_CACHE", "0")
    from fxc.backends.llvm.compile import target_machine
    if "+avx512bf16" not in target_machine()[3].split(","):
        print("this CPU lacks AVX-512 BF16: the bf16 forms are left out")
        forms = [f for f in forms if FORMS[f][1] != "bf16"]
    uw = _pass_module()
    print(f"threads: {os.environ.get('FXC_NUM_THREADS', 'all')}; load average {os.getloadavg()[0]:.2f}")
    for spec in args.layers:
        n, c, k, h, w = map(int, spec.split("x"))
        flops = 2 * n * k * h * w * c * 9
        built = {f: b for f in forms if (b := _layer(n, c, k, h, w, f, args.varying)) is not None}
        best = {f: float("inf") for f in built}
        for _ in range(args.runs):
            for f, (call, _) in built.items():
                best[f] = min(best[f], call())
        ref = built["direct"][1] if "direct" in built else _layer(n, c, k, h, w, "direct")[1]
        scale = max(float(np.abs(ref).max()), 1e-30)
        picks = {"fp32": uw.winograd_tile(c, k, n, h, w), "bf16": uw.winograd_tile(c, k, n, h, w, bf16_direct=True)}
        cells = []
        for f, (_, out) in built.items():
            choice, precision = FORMS[f]
            mark = "*" if picks[precision] == choice else ""
            cells.append(f"{f}{mark} {1e3 * best[f]:.3f} ms {flops / best[f] / 1e9:.0f} GF/s "
                         f"err {np.abs(out - ref).max() / scale:.1e}")
        print(f"{spec}: " + " | ".join(cells), flush=True)
    print("* the form fxc picks (bf16 forms: on a CPU whose vdpbf16ps runs at twice the FMA rate)")


if __name__ == "__main__":
    main()
