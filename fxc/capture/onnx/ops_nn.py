"""ONNX converters: convolution, pooling, normalisation, GEMM and quantisation (see table.py for the protocol).

Padding that ONNX states per side (`pads`, `auto_pad`) becomes an explicit pad where it is not symmetric; 1-d
convolutions and pools run as 2-d ones over a height of 1. The quantisation ops are ops_quant.py's.
"""
from __future__ import annotations

import numpy as np

from ...errors import ShapeError
from .ops_tensor import pad_nd
from .table import converter


def _text(v, default):
    v = default if v is None else v
    return v.decode() if isinstance(v, bytes) else v


def _given(at: dict, name: str, default: list) -> list:
    """An attribute list as the model gives it (an empty one is wrong, not absent), else the default."""
    return list(at[name]) if name in at else default


def _check_window(cx, x, nd: int, **lists) -> None:
    """A conv's or pool's window attributes fit an input of `nd` spatial dims: each list (kernel_shape, strides,
    dilations, output_padding: nd values >= 1, or >= 0 for output_padding; pads: 2 * nd values >= 0) as ONNX
    states, else a ShapeError naming the node."""
    if x.type.ndim < 3 or nd != x.type.ndim - 2:
        raise ShapeError(f"{cx.where()}: an input of shape {list(x.shape)} for a window of {nd} spatial dim(s)")
    for name, values in lists.items():
        want, low = (2 * nd, 0) if name == "pads" else (nd, 0 if name == "output_padding" else 1)
        if len(values) != want or any(v < low for v in values):
            raise ShapeError(f"{cx.where()}: {name} {list(values)} must be {want} values of at least {low} for "
                             f"{nd} spatial dim(s)")


def _geometry(cx, x, at, kernel):
    """(strides, dilations, ONNX pads [begins..., ends...]) of a conv or pool over x with `kernel`, checked."""
    nd = len(kernel)
    strides, dil = _given(at, "strides", [1] * nd), _given(at, "dilations", [1] * nd)
    pads = _given(at, "pads", [0] * 2 * nd)
    auto = _text(at.get("auto_pad"), "NOTSET")
    if auto not in ("NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID"):
        raise ShapeError(f"{cx.where()}: auto_pad {auto!r} is none of NOTSET, SAME_UPPER, SAME_LOWER, VALID")
    _check_window(cx, x, nd, kernel_shape=kernel, strides=strides, dilations=dil, pads=pads)
    if auto in ("SAME_UPPER", "SAME_LOWER"):
        pads = [0] * (2 * nd)
        for i in range(nd):
            n = x.shape[2 + i]
            out = -(-n // strides[i])
            total = max((out - 1) * strides[i] + (kernel[i] - 1) * dil[i] + 1 - n, 0)
            small = total // 2
            pads[i], pads[nd + i] = (small, total - small) if auto == "SAME_UPPER" else (total - small, small)
    elif auto == "VALID":
        pads = [0] * (2 * nd)
    return strides, dil, pads


def _to_2d(cx, x):
    """A 1-d (N, C, L) tensor as (N, C, 1, L)."""
    return cx.op("reshape", [x], shape=x.shape[:2] + (1,) + x.shape[2:])


def _from_2d(cx, y):
    return cx.op("reshape", [y], shape=y.shape[:2] + y.shape[3:])


@converter("Conv")
def conv(cx, ins, at):
    x, w = ins[0], ins[1]
    bias = ins[2] if len(ins) > 2 else None
    nd = w.type.ndim - 2
    kernel = _given(at, "kernel_shape", list(w.shape[2:]))
    if kernel != list(w.shape[2:]):
        raise ShapeError(f"{cx.where()}: kernel_shape {kernel} differs from the weight's {list(w.shape[2:])}")
    strides, dil, pads = _geometry(cx, x, at, kernel)
    if x.dtype not in ("float32", "float64"):
        raise cx.unsupported(f"Conv of {x.dtype}")
    if pads[:nd] == pads[nd:]:
        padding = pads[:nd]
    else:
        x, padding = pad_nd(cx, x, [0, 0] + pads[:nd] + [0, 0] + pads[nd:]), [0] * nd
    return cx.aten("aten.convolution.default", x, w, bias, strides, padding, dil, False, [0] * nd,
                   int(at.get("group", 1)))


MAX_STRIDE_PHASES = 4096


@converter("ConvTranspose")
def conv_transpose(cx, ins, at):
    x, w = ins[0], ins[1]
    bias = ins[2] if len(ins) > 2 else None
    nd = w.type.ndim - 2
    kernel = _given(at, "kernel_shape", list(w.shape[2:]))
    strides, dil = _given(at, "strides", [1] * nd), _given(at, "dilations", [1] * nd)
    out_pad = _given(at, "output_padding", [0] * nd)
    if kernel != list(w.shape[2:]):
        raise ShapeError(f"{cx.where()}: kernel_shape {kernel} differs from the weight's {list(w.shape[2:])}")
    _check_window(cx, x, nd, kernel_shape=kernel, strides=strides, dilations=dil, output_padding=out_pad,
                  pads=_given(at, "pads", [0] * 2 * nd))
    if int(np.prod(strides, dtype=object)) > MAX_STRIDE_PHASES:
        raise cx.unsupported(f"strides {strides} ({int(np.prod(strides, dtype=object))} phases; fxc computes a "
                             f"transposed convolution as one convolution per phase, at most {MAX_STRIDE_PHASES})")
    full = [(x.shape[2 + i] - 1) * strides[i] + (kernel[i] - 1) * dil[i] + 1 + out_pad[i] for i in range(nd)]
    auto = _text(at.get("auto_pad"), "NOTSET")
    pads = list(at.get("pads") or [0] * (2 * nd))
    if "output_shape" in at or auto in ("SAME_UPPER", "SAME_LOWER"):
        want = list(at["output_shape"])[-nd:] if "output_shape" in at else [x.shape[2 + i] * strides[i]
                                                                             for i in range(nd)]
        pads = [0] * (2 * nd)
        for i in range(nd):
            total = full[i] - want[i]
            small = total // 2
            pads[i], pads[nd + i] = (small, total - small) if auto == "SAME_UPPER" else (total - small, small)
    if x.dtype not in ("float32", "float64"):
        raise cx.unsupported(f"ConvTranspose of {x.dtype}")
    y = cx.aten("aten.convolution.default", x, w, None, strides, [0] * nd, dil, True, [0] * nd,
                int(at.get("group", 1)))
    extra = [full[i] - y.shape[2 + i] for i in range(nd)]     # output_padding: rows past the last input's reach
    if any(extra):
        y = pad_nd(cx, y, [0, 0] + [0] * nd + [0, 0] + extra)
    if any(pads):       # crop by the pads (a negative pad, from output_shape, extends)
        crop = [-p for p in pads]
        y = pad_nd(cx, y, [0, 0] + crop[:nd] + [0, 0] + crop[nd:])
    return cx.op("add", [y, _channel(cx, bias, nd + 2)]) if bias is not None else y


def _pool(kind):
    def conv_(cx, ins, at):
        x = ins[0]
        nd = x.type.ndim - 2
        kernel = list(at["kernel_shape"])
        strides, dil, pads = _geometry(cx, x, at, kernel)
        ceil = bool(at.get("ceil_mode", 0))
        want_idx = kind == "max" and len(cx.node.output) > 1 and cx.node.output[1]
        if nd == 3 and kind == "max" and not want_idx and not ceil:
            return _max_pool3d(cx, x, kernel, strides, dil, pads)
        if nd == 3 and kind == "avg" and dil == [1, 1, 1]:
            pool = lambda t, p: cx.op("avg_pool3d", [t], kernel=tuple(kernel), stride=tuple(strides),
                                      padding=tuple(p), ceil_mode=ceil, count_include_pad=True)
        elif nd not in (1, 2) or (kind != "max" and any(d != 1 for d in dil)):
            raise cx.unsupported(f"{nd}-d {kind} pooling" + (" with dilations" if nd in (1, 2) else ""))
        sym = pads[:nd] == pads[nd:] and all(p <= k // 2 for p, k in zip(pads[:nd], kernel))
        if nd == 1:
            x, kernel, strides, dil = _to_2d(cx, x), [1] + kernel, [1] + strides, [1] + dil
            pads = [0, pads[0], 0, pads[1]]
        n2 = len(kernel)
        if nd != 3:
            def pool(t, p):
                if kind == "max":
                    return cx.op("max_pool2d", [t], kernel=tuple(kernel), stride=tuple(strides), padding=tuple(p),
                                 dilation=tuple(dil), ceil_mode=ceil)
                return cx.op("avg_pool2d", [t], kernel=tuple(kernel), stride=tuple(strides), padding=tuple(p),
                             ceil_mode=ceil, count_include_pad=True)
        include = bool(at.get("count_include_pad", 0))
        if sym:
            p = pads[:n2]
            if kind == "max":
                y = pool(x, p)
                if want_idx:
                    idx = cx.op("max_pool2d_indices", [x, y], kernel=tuple(kernel), stride=tuple(strides),
                                padding=tuple(p), dilation=tuple(dil), ceil_mode=ceil)
                    return _finish(cx, y, nd), _flat_indices(cx, idx, x, nd, at)
                return _finish(cx, y, nd)
            if include or not any(p):
                return _finish(cx, pool(x, p), nd)
        elif want_idx:
            raise cx.unsupported("MaxPool indices with asymmetric pads")
        fill = float("-inf") if kind == "max" else 0.0
        xp = pad_nd(cx, x, [0, 0] + pads[:n2] + [0, 0] + pads[n2:], value=fill)
        y = pool(xp, [0] * n2)
        if kind == "avg" and not include and any(pads):
            ones = pad_nd(cx, cx.b.const(np.ones(x.shape[2:], dtype=x.dtype)), pads, value=0.0)
            cnt = pool(cx.op("reshape", [ones], shape=(1, 1) + ones.shape), [0] * n2)
            y = cx.op("div", [y, cnt])
        return _finish(cx, y, nd)
    return conv_


def _max_pool3d(cx, x, kernel, strides, dil, pads):
    """3-d max pooling as the maximum over the depth taps of 2-d max pools of the depth slices each tap reads."""
    x = pad_nd(cx, x, [0, 0] + pads[:3] + [0, 0] + pads[3:], value=float("-inf"))
    n, c, d, h, w = x.shape
    od = (d - dil[0] * (kernel[0] - 1) - 1) // strides[0] + 1
    out = None
    for a in range(kernel[0]):
        start = a * dil[0]
        xs = cx.op("slice", [x], dim=2, start=start, end=start + strides[0] * (od - 1) + 1, step=strides[0])
        xs = cx.op("reshape", [cx.op("permute", [xs], dims=(0, 2, 1, 3, 4))], shape=(n * od, c, h, w))
        y = cx.op("max_pool2d", [xs], kernel=tuple(kernel[1:]), stride=tuple(strides[1:]), padding=(0, 0),
                  dilation=tuple(dil[1:]), ceil_mode=False)
        y = cx.op("permute", [cx.op("reshape", [y], shape=(n, od, c) + y.shape[2:])], dims=(0, 2, 1, 3, 4))
        out = y if out is None else cx.op("maximum", [out, y])
    return out


def _finish(cx, y, nd):
    return _from_2d(cx, y) if nd == 1 else y


def _flat_indices(cx, idx, x, nd, at):
    """fxc's per-plane h*W+w indices as ONNX's: over the whole tensor, row- or column-major (storage_order)."""
    if nd == 1:
        idx = _from_2d(cx, idx)
    n, c = x.shape[:2]
    plane = int(np.prod(x.shape[2:], dtype=np.int64))
    if at.get("storage_order", 0):
        h, w = x.shape[2], x.shape[3]
        idx = cx.op("add", [cx.op("mul", [cx.op("remainder", [idx, w]), h]), cx.op("floordiv", [idx, w])])
    base = (np.arange(n * c, dtype=np.int64) * plane).reshape((n, c) + (1,) * (idx.type.ndim - 2))
    return cx.op("add", [idx, cx.b.const(base)])


converter("MaxPool")(_pool("max"))
converter("AveragePool")(_pool("avg"))


@converter("GlobalAveragePool")
def global_average_pool(cx, ins, at):
    x = ins[0]
    return cx.op("mean", [x], axes=tuple(range(2, x.type.ndim)), keepdim=True)


@converter("GlobalMaxPool")
def global_max_pool(cx, ins, at):
    x = ins[0]
    return cx.op("amax", [x], axes=tuple(range(2, x.type.ndim)), keepdim=True)


@converter("LpPool", since=11)
def lp_pool(cx, ins, at):
    x = ins[0]
    p = float(at.get("p", 2))
    k = int(np.prod(at["kernel_shape"]))
    sub = dict(at, count_include_pad=1)
    powed = cx.op("pow", [cx.op("abs", [x]), p])
    s = cx.op("mul", [_pool("avg")(cx, [powed], sub), float(k)])
    return cx.op("pow", [s, 1.0 / p])


# -- normalisation ---------------------------------------------------------------------------------------------
def _channel(cx, v, nd):
    """A per-channel [C] vector shaped to broadcast over (N, C, ...) of rank nd."""
    return cx.op("reshape", [v], shape=(-1,) + (1,) * (nd - 2))


@converter("BatchNormalization", since=7)
def batch_norm(cx, ins, at):
    x, scale, bias, mean, var = ins[:5]
    nd = x.type.ndim
    eps = float(at.get("epsilon", 1e-5))
    if at.get("training_mode", 0):      # batch statistics; the running ones move by momentum
        axes = (0,) + tuple(range(2, nd))
        y, m, _ = _normalize(cx, x, axes, eps)
        y = cx.op("add", [cx.op("mul", [y, _channel(cx, scale, nd)]), _channel(cx, bias, nd)])
        bm = cx.op("reshape", [m], shape=(x.shape[1],))
        d = cx.op("sub", [x, m])
        bv = cx.op("reshape", [cx.op("mean", [cx.op("mul", [d, d])], axes=axes, keepdim=True)], shape=(x.shape[1],))
        mom = float(at.get("momentum", 0.9))
        run = [cx.op("add", [cx.op("mul", [r, mom]), cx.op("mul", [b, 1.0 - mom])]) for r, b in ((mean, bm), (var, bv))]
        return y, run[0], run[1]
    inv = cx.op("div", [scale, cx.op("sqrt", [cx.op("add", [var, eps])])])
    shift = cx.op("sub", [bias, cx.op("mul", [mean, inv])])
    if nd < 2:
        return cx.op("add", [cx.op("mul", [x, inv]), shift])
    return cx.op("add", [cx.op("mul", [x, _channel(cx, inv, nd)]), _channel(cx, shift, nd)])


def _normalize(cx, x, axes, eps):
    """((x - mean) / sqrt(var + eps), mean, 1 / sqrt(var + eps)) over `axes`, statistics kept as dims."""
    mean = cx.op("mean", [x], axes=tuple(axes), keepdim=True)
    d = cx.op("sub", [x, mean])
    var = cx.op("mean", [cx.op("mul", [d, d])], axes=tuple(axes), keepdim=True)
    inv = cx.op("rsqrt", [cx.op("add", [var, eps])])
    return cx.op("mul", [d, inv]), mean, inv


@converter("InstanceNormalization", since=6)
def instance_norm(cx, ins, at):
    x, scale, bias = ins
    nd = x.type.ndim
    y, _, _ = _normalize(cx, x, range(2, nd), float(at.get("epsilon", 1e-5)))
    return cx.op("add", [cx.op("mul", [y, _channel(cx, scale, nd)]), _channel(cx, bias, nd)])


@converter("LayerNormalization", since=17)
def layer_norm(cx, ins, at):
    x, scale = ins[0], ins[1]
    bias = ins[2] if len(ins) > 2 else None
    axis = cx.axis(at.get("axis", -1), x.type.ndim)
    y, mean, inv = _normalize(cx, x, range(axis, x.type.ndim), float(at.get("epsilon", 1e-5)))
    y = cx.op("mul", [y, scale])
    if bias is not None:
        y = cx.op("add", [y, bias])
    return y, mean, inv


@converter("GroupNormalization", since=18)
def group_norm(cx, ins, at):
    x, scale, bias = ins
    g = int(at["num_groups"])
    n, c = x.shape[:2]
    t = cx.op("reshape", [x], shape=(n, g, int(np.prod(x.shape[1:], dtype=np.int64)) // g))
    y, _, _ = _normalize(cx, t, (2,), float(at.get("epsilon", 1e-5)))
    y = cx.op("reshape", [y], shape=x.shape)
    if scale.shape[0] != c:      # opset 18: a scale and bias per group
        scale = cx.op("reshape", [cx.op("expand", [cx.op("reshape", [scale], shape=(g, 1))], size=(g, c // g))],
                      shape=(c,))
        bias = cx.op("reshape", [cx.op("expand", [cx.op("reshape", [bias], shape=(g, 1))], size=(g, c // g))],
                     shape=(c,))
    nd = x.type.ndim
    return cx.op("add", [cx.op("mul", [y, _channel(cx, scale, nd)]), _channel(cx, bias, nd)])


@converter("RMSNormalization", since=23)
def rms_norm(cx, ins, at):
    x, scale = ins
    axis = cx.axis(at.get("axis", -1), x.type.ndim)
    ms = cx.op("mean", [cx.op("mul", [x, x])], axes=tuple(range(axis, x.type.ndim)), keepdim=True)
    return cx.op("mul", [cx.op("mul", [x, cx.op("rsqrt", [cx.op("add", [ms, float(at.get("epsilon", 1e-5))])])]),
                         scale])


@converter("MeanVarianceNormalization", since=9)
def mean_variance_norm(cx, ins, at):
    x = ins[0]
    axes = cx.axes(at.get("axes") or [0, 2, 3], x.type.ndim)
    mean = cx.op("mean", [x], axes=tuple(axes), keepdim=True)
    d = cx.op("sub", [x, mean])
    var = cx.op("mean", [cx.op("mul", [d, d])], axes=tuple(axes), keepdim=True)
    return cx.op("div", [d, cx.op("add", [cx.op("sqrt", [var]), 1e-9])])


@converter("LRN")
def lrn(cx, ins, at):
    x = ins[0]
    size = int(at["size"])
    alpha, beta, bias = float(at.get("alpha", 1e-4)), float(at.get("beta", 0.75)), float(at.get("bias", 1.0))
    sq = cx.op("mul", [x, x])
    lo, hi = (size - 1) // 2, size - 1 - (size - 1) // 2
    nd = x.type.ndim
    padded = pad_nd(cx, sq, [0, lo] + [0] * (nd - 2) + [0, hi] + [0] * (nd - 2))
    c = x.shape[1]
    acc = None
    for k in range(size):
        part = cx.op("slice", [padded], dim=1, start=k, end=k + c, step=1)
        acc = part if acc is None else cx.op("add", [acc, part])
    den = cx.op("pow", [cx.op("add", [cx.op("mul", [acc, alpha / size]), bias]), beta])
    return cx.op("div", [x, den])


@converter("LpNormalization")
def lp_normalization(cx, ins, at):
    x = ins[0]
    axis = cx.axis(at.get("axis", -1), x.type.ndim)
    p = int(at.get("p", 2))
    if p == 1:
        norm = cx.op("sum", [cx.op("abs", [x])], axes=(axis,), keepdim=True)
    else:
        norm = cx.op("sqrt", [cx.op("sum", [cx.op("mul", [x, x])], axes=(axis,), keepdim=True)])
    norm = cx.op("where", [cx.op("eq", [norm, 0.0]), cx.scalar(1.0, x.dtype), norm])     # 0 / 0 is 0, as in ONNX
    return cx.op("div", [x, norm])


# -- GEMM ------------------------------------------------------------------------------------------------------
def matmul2(cx, a, b):
    """numpy's matmul: 1-d operands gain (and lose) a dim; batch dims broadcast."""
    va, vb = a.type.ndim == 1, b.type.ndim == 1
    if va:
        a = cx.op("reshape", [a], shape=(1, a.shape[0]))
    if vb:
        b = cx.op("reshape", [b], shape=(b.shape[0], 1))
    y = cx.op("matmul", [a, b])
    if va or vb:
        shape = y.shape[:-2] + (() if va else (y.shape[-2],)) + (() if vb else (y.shape[-1],))
        y = cx.op("reshape", [y], shape=shape)
    return y


@converter("MatMul")
def matmul(cx, ins, at):
    a, b = ins
    if a.dtype not in ("float32", "float64", "int32", "int64"):
        raise cx.unsupported(f"MatMul of {a.dtype}")
    return matmul2(cx, a, b)


@converter("Gemm")
def gemm(cx, ins, at):
    a, b = ins[0], ins[1]
    c = ins[2] if len(ins) > 2 else None
    y = cx.op("matmul", [a, b], trans_a=bool(at.get("transA", 0)), trans_b=bool(at.get("transB", 0)))
    alpha, beta = at.get("alpha", 1.0), at.get("beta", 1.0)
    if alpha != 1.0:
        y = cx.op("mul", [y, float(alpha)])
    if c is not None and beta != 0.0:
        y = cx.op("add", [y, c if beta == 1.0 else cx.op("mul", [c, float(beta)])])
    return y


# -- losses ------------------------------------------------------------------------------------------------------
def nll_loss(cx, x, target, weight, at):
    """NegativeLogLikelihoodLoss over log-probabilities x [N, C, d...] and class indices target [N, d...]."""
    t = target if target.dtype == "int64" else cx.op("cast", [target], dtype="int64")
    ignore = at.get("ignore_index")
    valid = cx.op("ne", [t, int(ignore)]) if ignore is not None else None
    if valid is not None:
        t = cx.op("where", [valid, t, cx.scalar(0, "int64")])
    shape = list(t.shape)
    picked = cx.op("gather", [x, cx.op("reshape", [t], shape=tuple(shape[:1] + [1] + shape[1:]))], dim=1)
    picked = cx.op("reshape", [picked], shape=tuple(shape))
    w = cx.op("index", [weight, t], dims=(0,)) if weight is not None else None
    if valid is not None:
        mask = cx.op("cast", [valid], dtype=x.dtype)
        w = mask if w is None else cx.op("mul", [w, mask])
    loss = cx.op("neg", [picked if w is None else cx.op("mul", [picked, w])])
    red = at.get("reduction", "mean")
    if red == "none":
        return loss
    total = cx.op("sum", [loss], axes=tuple(range(loss.type.ndim)), keepdim=False)
    if red == "sum":
        return total
    if w is None:
        return cx.op("div", [total, float(loss.type.numel)])
    return cx.op("div", [total, cx.op("sum", [w], axes=tuple(range(w.type.ndim)), keepdim=False)])


@converter("NegativeLogLikelihoodLoss", since=12)
def negative_log_likelihood_loss(cx, ins, at):
    return nll_loss(cx, ins[0], ins[1], ins[2] if len(ins) > 2 else None, at)


@converter("SoftmaxCrossEntropyLoss", since=12)
def softmax_cross_entropy_loss(cx, ins, at):
    scores = ins[0]
    logp = cx.op("log_softmax", [scores], dim=1)
    loss = nll_loss(cx, logp, ins[1], ins[2] if len(ins) > 2 else None, at)
    return loss, logp


@converter("CausalConvWithState", since=27)
def causal_conv_with_state(cx, ins, at):
    """Depthwise causal conv1d over [past_state, input]; the state's next value is the last k - 1 positions."""
    x, w = ins[0], ins[1]
    bias, past = (ins[2] if len(ins) > 2 else None), (ins[3] if len(ins) > 3 else None)
    b, c, _ = x.shape
    k = w.shape[2]
    act = at.get("activation", "none")
    if act not in ("none", "silu", "swish"):
        raise cx.unsupported(f"activation {act!r}")
    if past is None:
        past = cx.b.const(np.zeros((b, c, k - 1), dtype=x.dtype))
    padded = cx.op("cat", [past, x], dim=2) if k > 1 else x
    y = cx.aten("aten.convolution.default", padded, w, bias, [1], [0], [1], False, [0], c)
    if act != "none":
        y = cx.op("silu", [y])
    n = padded.shape[2]
    return y, cx.op("slice", [padded], dim=2, start=n - (k - 1), end=n, step=1)
