"""oneDNN on the llvm target: its pattern table (convolutions and matmuls with their epilogues as post-ops) and how
a match becomes a "dnnl:<routine>" step of the CPU module's plan (fxc/runtime/cpu/dnnl.py, dnnl_shim.c run it).

The patterns are read on fxc's CPU graph after its layout passes, so they take fxc's own layouts, which are
oneDNN's: activations NCHW or NCHW{L}c (oneDNN's nChw{L}c), weights packed in blocks of L output channels
([O/L, C, KH, KW, L]: Oihw{L}o; depthwise [C/L, KH, KW, L]: Goihw{L}g). A match is

    [pad] conv2d_packed | depthwise_blocked  [add bias] [add residual] [relu | clamp | hardtanh]
    matmul_packed                            [add bias] [add residual] [relu | clamp | hardtanh]

(the pad folded into the convolution's padding, the bias as its bias, the residual as a binary post-op reading
the other tensor in place, the activation as an eltwise post-op; a matmul's weight, packed by fxc in column
blocks, is unpacked by the step into its own copy). Each check reads dtypes, shapes, layouts and
attributes, then asks oneDNN itself whether it makes the primitive, and with which implementation (its
reference one, "ref:any", is refused: it is slow); it returns the reason it does not take a match, or None.

    matmul_packed [add bias] rnn_layer (lstm, gru)                 (the input projection and the layer: one oneDNN
                                                                    LSTM / linear-before-reset GRU layer)

Step parameters (int64, fxc/runtime/cpu/dnnl_shim.c reads them): routine (1 conv, 2 matmul, 3 rnn), threads (0
here: the CPU lowering writes the build's), the weights (a bit mask of operand positions: the lowering writes 1
when all are constants, so oneDNN's reordered copy is made once), then the routine's sizes and post-ops.
"""
from __future__ import annotations

import math
import struct

from ..library import Library, Pattern
from . import shim

CONV, MATMUL, RNN = 1, 2, 3
ROUTINES = {CONV: "conv", MATMUL: "matmul", RNN: "rnn"}
ACTS = {"relu": 1, "clamp": 2, "hardtanh": 2}


def _bits(x: float) -> int:
    return struct.unpack("<i", struct.pack("<f", x))[0]


def _act(n) -> tuple:
    """(act code, lo bits, hi bits) of an activation node, or None for an unbounded clamp side it cannot take."""
    if n is None:
        return 0, 0, 0
    if n.op == "relu":
        return 1, 0, 0
    lo, hi = n.attrs.get("lo", -1.0 if n.op == "hardtanh" else None), n.attrs.get("hi", 1.0 if n.op == "hardtanh"
                                                                                    else None)
    lo, hi = -3.0e38 if lo is None else float(lo), 3.0e38 if hi is None else float(hi)
    return 2, _bits(lo), _bits(hi)


def _split(nodes):
    """(pad, root, adds, act) of a match."""
    pad = nodes[0] if nodes[0].op == "pad" else None
    rest = nodes[1:] if pad else nodes
    act = rest[-1] if rest[-1].op in ACTS else None
    return pad, rest[0], rest[1:len(rest) - (act is not None)], act


def _epilogue(root, adds, bias_ok) -> tuple:
    """(bias Value or None, residual Value or None, None) of the adds after root, or (.., .., why not)."""
    prev, out, bias, res = root.outputs[0], root.outputs[0], None, None
    for a in adds:
        other = a.inputs[1] if a.inputs[0] is prev else a.inputs[0]
        if other.dtype != "float32":
            return None, None, f"an add of a {other.dtype} operand"
        if other.shape == out.shape and res is None:
            res = other
        elif bias is None and bias_ok(other.shape):
            bias = other
        else:
            return None, None, (f"an add of shape {list(other.shape)} onto {list(out.shape)}: neither a bias "
                                f"(per output channel) nor a residual of the output's shape (broadcasting)")
        prev = a.outputs[0]
    return bias, res, None


def _static(nodes) -> str | None:
    for n in nodes:
        for v in list(n.inputs) + list(n.outputs):
            if any(not isinstance(d, int) for d in v.shape):
                return "symbolic sizes (a dynamic batch): a oneDNN primitive takes fixed sizes"
            if v.dtype != "float32":
                return f"{v.dtype} operands: fxc calls oneDNN for float32 only"
    return None


def _spatial_pad(pad, ndim) -> tuple | str:
    """(top, left, bottom, right) of a zero pad over H and W only, else the reason."""
    if pad.attrs.get("mode", "constant") != "constant" or float(pad.attrs.get("value", 0.0)) != 0.0:
        return "a non-zero or non-constant pad"
    p = list(pad.attrs["pad"])
    widths = [(0, 0)] * ndim
    for k in range(len(p) // 2):
        widths[ndim - 1 - k] = (p[2 * k], p[2 * k + 1])
    h, w = (2, 3)
    if any(widths[d] != (0, 0) for d in range(ndim) if d not in (h, w)) or min(map(min, widths)) < 0:
        return f"a pad {p} of other than the H and W dims (or a crop)"
    return widths[h][0], widths[w][0], widths[h][1], widths[w][1]


def _conv(nodes):
    """(params, operands [dst, src, weights, bias?, residual?]) of a conv match, or (why not, None)."""
    pad, root, adds, act = _split(nodes)
    why = _static(nodes)
    if why:
        return why, None
    x = pad.inputs[0] if pad else root.inputs[0]
    w, out = root.inputs[1], nodes[-1].outputs[0]
    y = root.outputs[0]
    blocked_in = x.type.ndim == 5
    blocked_out = y.type.ndim == 5
    lanes = w.shape[-1]
    if lanes not in (4, 8, 16) or (blocked_in and x.shape[4] != lanes and root.op == "conv2d_packed"):
        return f"weights in blocks of {lanes} with {x.shape[-1] if blocked_in else 1}-lane activations", None
    if root.op == "depthwise_blocked":
        if not (blocked_in and blocked_out):
            return "a depthwise conv over NCHW (fxc's depthwise_blocked takes NCHW{L}c)", None
        c = x.shape[1] * lanes
        o, kh, kw, dw, wl = c, w.shape[1], w.shape[2], 1, lanes
        chans = c
    else:
        if root.attrs.get("groups", 1) != 1:
            return "a grouped convolution", None
        chans = w.shape[1]
        o, kh, kw, dw, wl = root.attrs["out_channels"], w.shape[2], w.shape[3], 0, lanes
    if y.shape[1] * (y.shape[4] if blocked_out else 1) < o or (not blocked_out and y.shape[1] != o):
        return "an output whose channels are not the weights' output channels", None
    if blocked_out and -(-o // lanes) != y.shape[1]:
        return "a padded output channel block count oneDNN does not write", None
    n, h, wd = x.shape[0], x.shape[2], x.shape[3]
    pads = _spatial_pad(pad, x.type.ndim) if pad else (0, 0, 0, 0)
    if isinstance(pads, str):
        return pads, None
    oc_shape = (lambda s: len(s) <= 5 and all(d == 1 for d in s[:-4]) and tuple(s[-4:]) == (y.shape[1], 1, 1,
                                                                                             lanes)) \
        if blocked_out else (lambda s: tuple(s) in ((1, o, 1, 1), (o, 1, 1)))
    bias, res, why = _epilogue(root, adds, oc_shape)
    if why:
        return why, None
    a, lo, hi = _act(act)
    sh, sw = root.attrs.get("stride", (1, 1))
    dh, dwl = root.attrs.get("dilation", (1, 1))
    params = (CONV, 0, 1 << 2, n, chans, h, wd, o, kh, kw, y.shape[2], y.shape[3], sh, sw, dh, dwl, *pads,
              lanes if blocked_in else 0, lanes if blocked_out else 0, wl, dw, int(bias is not None),
              int(res is not None), a, lo, hi)
    return params, [out, x, w] + [v for v in (bias, res) if v is not None]


def _matmul(nodes):
    pad, root, adds, act = _split(nodes)
    why = _static(nodes)
    if why:
        return why, None
    a, bp, out = root.inputs[0], root.inputs[1], nodes[-1].outputs[0]
    if root.attrs.get("trans_a", False):
        return "a transposed A (matmul_packed trans_a)", None
    if bp.type.ndim != 3:
        return f"a batched B ({list(bp.shape)} packed): oneDNN is called for one weight matrix", None
    n, lanes = root.attrs["n"], bp.shape[2]
    rows, k = math.prod(a.shape[:-1]), a.shape[-1]
    blocks = -(-n // lanes)
    bias, res, why = _epilogue(root, adds, lambda s: tuple(s)[-1:] == (n,) and math.prod(s) == n)
    if why:
        return why, None
    act_code, lo, hi = _act(act)
    params = (MATMUL, 0, 1 << 2, rows, k, n, lanes, blocks, int(bias is not None), int(res is not None), act_code,
              lo, hi)
    return params, [out, a, bp] + [v for v in (bias, res) if v is not None]


def _rnn(nodes):
    """LSTM / GRU: the input projection (matmul_packed [+ add bias]) and the rnn_layer reading it, as one oneDNN
    layer (it projects x itself)."""
    mm, rnn = nodes[0], nodes[-1]
    add = nodes[1] if len(nodes) == 3 else None
    why = _static(nodes)
    if why:
        return why, None
    mode = rnn.attrs["mode"]
    if mode not in ("lstm", "gru"):
        return f"a {mode} layer: fxc calls oneDNN's LSTM and GRU only", None
    a, bp = mm.inputs
    out = rnn.outputs[0]
    batch_first = bool(rnn.attrs.get("batch_first", False))
    b, t, h = out.shape if batch_first else (out.shape[1], out.shape[0], out.shape[2])
    gh = (4 if mode == "lstm" else 3) * h
    if mm.attrs.get("trans_a", False) or bp.type.ndim != 3 or a.type.ndim != 2 or mm.attrs["n"] != gh:
        return "an input projection other than x rows times one packed W_ih", None
    bias = None
    if add is not None:
        bias = add.inputs[1] if add.inputs[0] is mm.outputs[0] else add.inputs[0]
        if math.prod(bias.shape) != gh or tuple(bias.shape)[-1] != gh:
            return f"an input projection's add of shape {list(bias.shape)} (not a bias of {gh})", None
    ins = rnn.inputs
    whh, h0, extra = ins[1], ins[2], list(ins[3:])
    c0 = extra.pop(0) if mode == "lstm" else None
    bhh = extra.pop(0) if extra else None
    params = (RNN, 0, 0, 1 if mode == "lstm" else 2, t, b, a.shape[1], h, bp.shape[2], int(batch_first),
              int(bool(rnn.attrs.get("reverse", False))), int(bias is not None), int(bhh is not None))
    outs = list(rnn.outputs)
    operands = outs + [a, bp] + ([bias] if bias is not None else []) + [whh, h0] + \
        ([c0] if c0 is not None else []) + ([bhh] if bhh is not None else [])
    weights = [bp, whh] + [v for v in (bias, bhh) if v is not None]
    mask = sum(1 << i for i, v in enumerate(operands) if any(v is w for w in weights))
    return params[:2] + (mask,) + params[3:], operands


def _checked(build, ref_ok=False):
    """The check of a pattern whose parameters build makes (ref_ok: oneDNN's RNN layers report "ref:any" for their
    driver, whose GEMMs and cells are its optimized ones)."""
    def check(nodes, caps) -> str | None:
        if "float32" not in caps.dtypes:
            return "the CPU has no float32"
        params, _ = build(nodes)
        if isinstance(params, str):
            return params
        why, impl = shim.primitive(params)
        if why is None and impl.startswith("ref") and not ref_ok:
            return f"oneDNN has only its reference implementation ({impl}) for it"
        return why
    return check


def _patterns() -> tuple:
    tails = [(), ("add",), ("add", "add")]
    acts = [(), ("relu",), ("clamp",), ("hardtanh",)]
    out = []
    for root, name, build in (("conv2d_packed", "conv", _conv), ("depthwise_blocked", "conv", _conv),
                              ("matmul_packed", "matmul", _matmul)):
        heads = [("pad",), ()] if name == "conv" else [()]
        chains = [h + (root,) + t + a for h in heads for t in tails for a in acts]
        out += [Pattern(name, c, _checked(build)) for c in sorted(chains, key=len, reverse=True)]
    rnn = _checked(_rnn, ref_ok=True)
    return tuple(out) + (Pattern("rnn", ("matmul_packed", "add", "rnn_layer"), rnn),
                         Pattern("rnn", ("matmul_packed", "rnn_layer"), rnn))


PATTERNS = _patterns()


def lower(nodes) -> tuple:
    """("dnnl:conv" | "dnnl:matmul", step parameters, operands [dst, src, weights, bias?, residual?])."""
    build = _rnn if nodes[-1].op == "rnn_layer" else _matmul if nodes[0].op == "matmul_packed" else _conv
    params, operands = build(nodes)
    return f"dnnl:{ROUTINES[params[0]]}", params, operands


LIBRARY = Library("dnnl", ("llvm",), PATTERNS, lower, "fxc.runtime.cpu.dnnl")
