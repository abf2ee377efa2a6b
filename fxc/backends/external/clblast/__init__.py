"""CLBlast on the opencl target: its pattern table (GEMM: dense, matmul, batch matmul; convolution: conv2d with its
zero pad, through CLBlast's convgemm) and how a match becomes a "clblast:sgemm" or "clblast:sconvgemm" plan step
(fxc/runtime/opencl/clblast.py runs it on the module's own buffers).

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


def _check_conv(nodes, caps) -> str | None:
    conv = nodes[-1]
    x, w = conv.inputs
    (y,) = conv.outputs
    if y.dtype != "float32" or "float32" not in caps.dtypes:
        return f"{y.dtype} operands: CLBlast's convgemm is called for float32 (Sconvgemm) only"
    if any(not isinstance(d, int) for v in (x, w, y) for d in v.shape):
        return "symbolic sizes (a dynamic batch): a CLBlast call takes fixed sizes"
    if conv.attrs.get("groups", 1) != 1:
        return f"a grouped conv (groups {conv.attrs['groups']}): convgemm runs groups = 1"
    if y.type.numel == 0:
        return "an empty result"
    if len(nodes) == 2:
        pad = nodes[0]
        p = tuple(pad.attrs["pad"]) + (0,) * (4 - len(pad.attrs["pad"]))
        if pad.attrs.get("mode", "constant") != "constant" or pad.attrs.get("value", 0.0) != 0.0 or \
                len(pad.attrs["pad"]) > 4 or p[0] != p[1] or p[2] != p[3] or min(p) < 0:
            return "the pad before the conv is not a symmetric zero pad of H and W (convgemm's padding)"
    return None


PATTERNS = (Pattern("gemm", ("matmul",), _check_matmul),
            Pattern("convgemm", ("pad", "conv2d"), _check_conv),
            Pattern("convgemm", ("conv2d",), _check_conv))


def _lower_conv(nodes) -> tuple:
    """("clblast:sconvgemm", (channels, height, width, kernel_h, kernel_w, pad_h, pad_w, stride_h, stride_w,
    dilation_h, dilation_w, kernels, batch), [Y, X, W]) of a matched conv (X before its pad)."""
    conv = nodes[-1]
    x = nodes[0].inputs[0]
    w = conv.inputs[1]
    pad = tuple(nodes[0].attrs["pad"]) + (0,) * 4 if len(nodes) == 2 else (0,) * 4
    n, c, h, wd = x.shape
    k, _, kh, kw = w.shape
    (sh, sw), (dh, dw) = conv.attrs.get("stride", (1, 1)), conv.attrs.get("dilation", (1, 1))
    return ("clblast:sconvgemm", (c, h, wd, kh, kw, pad[2], pad[0], sh, sw, dh, dw, k, n),
            [conv.outputs[0], x, w])


def lower(nodes) -> tuple:
    """The plan step of a match: a conv's (_lower_conv), or ("clblast:sgemm", (trans_a, trans_b, m, n, k, batch,
    a_stride, b_stride), [C, A, B]) of a matched matmul: a batch of A over one 2-D B (nn.Linear over a sequence) is
    one GEMM of batch x m rows."""
    if nodes[-1].op == "conv2d":
        return _lower_conv(nodes)
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
