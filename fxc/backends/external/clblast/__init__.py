"""CLBlast on the opencl target: its pattern table (GEMM: dense, matmul, batch matmul) and how a matched matmul
becomes an "clblast:sgemm" plan step (fxc/runtime/opencl/clblast.py runs it on the module's own buffers).

Each check reads the node and the target's Caps and returns the reason CLBlast does not take it, or None. The
epilogues (bias, activation) are not in the patterns: they stay fxc kernels after the call.
"""
from __future__ import annotations

import math

from ..library import Library, Pattern


def _check_matmul(nodes, caps) -> str | None:
    n = nodes[-1]
    a, b = n.inputs
    (c,) = n.outputs
    if c.dtype != "float32":
        return f"{c.dtype} operands: CLBlast is called for float32 GEMM (SGEMM) only"
    if "float32" not in caps.dtypes:
        return "the device has no float32"
    if any(not isinstance(d, int) for v in (a, b, c) for d in v.shape):
        return "symbolic sizes (a dynamic batch): a CLBlast call takes fixed sizes"
    if c.type.numel == 0:
        return "an empty result"
    if b.type.ndim > 2 and a.shape[:-2] != b.shape[:-2]:
        return (f"broadcast batch dims {a.shape[:-2]} x {b.shape[:-2]}: StridedBatched GEMM takes one batch "
                f"shape on both operands")
    if b.type.ndim == 2 and a.type.ndim > 2 and n.attrs.get("trans_a", False):
        return "a transposed batch of A over one B: not one strided GEMM"
    return None


PATTERNS = (Pattern("gemm", ("matmul",), _check_matmul),)


def lower(nodes) -> tuple:
    """("clblast:sgemm", (trans_a, trans_b, m, n, k, batch, a_stride, b_stride), [C, A, B]) of a matched matmul: a
    batch of A over one 2-D B (nn.Linear over a sequence) is one GEMM of batch x m rows."""
    n = nodes[-1]
    a, b = n.inputs
    ta, tb = int(bool(n.attrs.get("trans_a", False))), int(bool(n.attrs.get("trans_b", False)))
    m, k = (a.shape[-1], a.shape[-2]) if ta else (a.shape[-2], a.shape[-1])
    nn = b.shape[-2] if tb else b.shape[-1]
    batch = math.prod(a.shape[:-2])
    operands = [n.outputs[0], a, b]
    if b.type.ndim == 2:
        return "clblast:sgemm", (ta, tb, m * batch, nn, k, 1, 0, 0), operands
    return "clblast:sgemm", (ta, tb, m, nn, k, batch, m * k, k * nn), operands


LIBRARY = Library("clblast", ("opencl",), PATTERNS, lower, "fxc.runtime.opencl.clblast")
