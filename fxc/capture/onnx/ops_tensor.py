"""ONNX converters: constants, shapes, casts, movement and indexing (see table.py for the protocol).

Every shape-valued input (Reshape's shape, Slice's starts, Pad's pads...) must be a constant; Shape and Size of a
value are constants, and ops over constants fold as they are built. Where the model's named dims stay symbolic, a
Shape is a symbolic shape value (table.py) and Flatten, Reshape (0 and -1) and Size compute with the symbols.
"""
from __future__ import annotations

import numpy as np
from onnx import TensorProto, numpy_helper

from ...errors import IndexOutOfRangeError, ModelFileError, ShapeError
from ...ops.common import broadcast_shapes
from ...symbolic.expr import Expr, poly
from ...symbolic.sym import canonical, symbolic
from .table import MAX_ELEMENTS, converter

ONNX_DTYPES = {1: "float32", 2: "uint8", 3: "int8", 5: "int16", 6: "int32", 7: "int64", 9: "bool", 10: "float32",
               11: "float64"}     # float16 computes in float32 between the model's inputs and outputs, as
#                                   ONNX Runtime's CPU provider does (equal outputs: tests/capture/onnx/test_float16.py)


def fxc_dtype(cx, elem_type: int, what: str = "") -> str:
    """fxc's dtype of an ONNX elem_type; UnsupportedOpError for one fxc lacks, ModelFileError for one that is no
    ONNX type (UNDEFINED, 0, or an unknown number). `what`: the tensor it types, for the message."""
    dt = ONNX_DTYPES.get(int(elem_type))
    if dt is not None:
        return dt
    where = f"{cx.where()}{': ' + what if what else ''}"
    if int(elem_type) not in TensorProto.DataType.values() or int(elem_type) == TensorProto.UNDEFINED:
        raise ModelFileError(f"{where}: elem_type {int(elem_type)} is no ONNX tensor type; the model is corrupt")
    raise cx.unsupported(f"{what + ' of ' if what else ''}tensors of {TensorProto.DataType.Name(int(elem_type))}")


def as_array(t) -> np.ndarray:
    """A TensorProto attribute's data as a numpy array (float16 widened to float32); a tensor whose data does not
    fit its dims or type is a ModelFileError naming it."""
    if isinstance(t, np.ndarray):
        a = t
    else:
        try:
            a = numpy_helper.to_array(t)
        except (ValueError, KeyError, TypeError, IndexError) as e:
            raise ModelFileError(f"tensor {t.name!r} (dims {list(t.dims)}, elem_type {t.data_type}) cannot be read: "
                                 f"{type(e).__name__}: {e}; the model is corrupt") from None
        if a.shape != tuple(t.dims):
            raise ModelFileError(f"tensor {t.name!r} holds {a.size} value(s), which do not fill its dims "
                                 f"{list(t.dims)}; the model is corrupt")
    return a.astype(np.float32) if a.dtype == np.float16 else a


@converter("Constant")
def constant(cx, ins, at):
    for key in ("value", "value_float", "value_floats", "value_int", "value_ints"):
        if key in at:
            v = at[key]
            if key == "value":
                return cx.b.const(as_array(v))
            return cx.b.const(np.array(v, dtype=np.float32 if "float" in key else np.int64))
    raise cx.unsupported(f"a Constant with {sorted(at)}")


@converter("ConstantOfShape")
def constant_of_shape(cx, ins, at):
    value = as_array(at["value"]).reshape(-1) if "value" in at else np.zeros(1, np.float32)
    shape = cx.ints(ins[0], "shape")
    if int(np.prod(shape, dtype=object)) > MAX_ELEMENTS:
        raise ShapeError(f"{cx.where()}: a shape {shape} of more than {MAX_ELEMENTS} elements, which no device holds")
    if any(d < 0 for d in shape) or value.size != 1:
        raise ShapeError(f"{cx.where()}: a shape {shape} with a negative dim, or a value of {value.size} elements "
                         f"(ONNX: one); fix the model")
    fill = cx.b.const(np.full((1,) * len(shape), value[0], dtype=value.dtype))
    return cx.op("expand", [fill], size=tuple(shape))   # folded where small (fold_constants.folds), else run time


@converter("Shape")
def shape(cx, ins, at):
    dims = ins[0].shape[slice(at.get("start", 0), at.get("end", len(ins[0].shape)))]
    return cx.b.const(np.array(dims, dtype=object if symbolic(dims) else np.int64))     # (table.py: symbolic)


@converter("Size")
def size(cx, ins, at):
    n = numel(ins[0].shape)
    return cx.b.const(np.array(n, dtype=object if isinstance(n, Expr) else np.int64))


def numel(dims):
    """The product of dims (ints, or size symbols: then an int64 expression in its one form)."""
    out = 1
    for d in dims:
        out = canonical(out * d) if isinstance(d, Expr) or isinstance(out, Expr) else out * int(d)
    return out


def quotient(cx, total, part, x, shape):
    """total / part exactly (ints or polynomials of size symbols: a Reshape's -1 over a [batch*8, 4] tensor);
    ShapeError when it is not whole."""
    if not isinstance(total, Expr) and not isinstance(part, Expr):
        if part == 0 or total % part:
            raise ShapeError(f"{cx.where()}: cannot reshape {list(x.shape)} to {shape}")
        return total // part
    pt, pp = poly(total), poly(part)
    if len(pp) == 1:
        (mp, cp), = pp.items()
        out = 0
        for m, c in pt.items():
            rest = list(m)
            for s in mp:
                if s not in rest:
                    break
                rest.remove(s)
            else:
                if c % cp == 0:
                    term = c // cp
                    for s in rest:
                        term = s * term
                    out = canonical(out + term)
                    continue
            break
        else:
            return out
    raise ShapeError(f"{cx.where()}: cannot reshape {list(x.shape)} to {shape}: {total!r} is not a whole multiple "
                     f"of {part!r}")


@converter("Cast")
def cast(cx, ins, at):
    dt = fxc_dtype(cx, at["to"])
    x = ins[0]
    return cx.op("copy", [x]) if x.dtype == dt else cx.op("cast", [x], dtype=dt)


@converter("CastLike")
def cast_like(cx, ins, at):
    x, like = ins
    return cx.op("copy", [x]) if x.dtype == like.dtype else cx.op("cast", [x], dtype=like.dtype)


@converter("Range")
def range_(cx, ins, at):
    start, limit, delta = (cx.const(v, "start, limit and delta") for v in ins)
    if delta == 0 or not all(np.isfinite(v).all() for v in (start, limit, delta)):
        raise ShapeError(f"{cx.where()}: start {start}, limit {limit} and delta {delta}: a delta of 0 or a value "
                         f"that is not finite gives no range; fix the model")
    cx.table(int(max(np.ceil((float(limit) - float(start)) / float(delta)), 0)), "range")
    return cx.b.const(np.arange(start, limit, delta).astype(start.dtype))


@converter("EyeLike")
def eye_like(cx, ins, at):
    x = ins[0]
    dt = fxc_dtype(cx, at["dtype"]) if "dtype" in at else x.dtype
    return cx.b.const(np.eye(x.shape[0], x.shape[1], k=int(at.get("k", 0)), dtype=dt))


@converter("Dropout")
def dropout(cx, ins, at):
    x = ins[0]
    training = len(ins) > 2 and ins[2] is not None and cx.const(ins[2], "training_mode").item()
    ratio = cx.const(ins[1], "ratio").item() if training and len(ins) > 1 and ins[1] is not None else 0.5
    if training and ratio != 0:
        raise cx.unsupported("Dropout in training mode (random)")
    return x, cx.b.const(np.ones(x.shape, dtype=bool))


# -- shapes ----------------------------------------------------------------------------------------------------
def reshape_to(cx, x, shape, allowzero=False):
    shape = list(shape)
    if not allowzero:
        shape = [x.shape[i] if not isinstance(d, Expr) and d == 0 else d for i, d in enumerate(shape)]
    total = numel(x.shape)
    if sum(1 for d in shape if not isinstance(d, Expr) and d == -1) == 1:
        at = next(i for i, d in enumerate(shape) if not isinstance(d, Expr) and d == -1)
        shape[at] = quotient(cx, total, numel(shape[:at] + shape[at + 1:]), x, shape)
    if numel(shape) != total:     # (equal sizes of symbols are the same object: canonical)
        raise ShapeError(f"{cx.where()}: cannot reshape {list(x.shape)} to {shape}")
    return cx.op("reshape", [x], shape=tuple(shape))


@converter("Reshape")
def reshape_1(cx, ins, at):
    return reshape_to(cx, ins[0], at["shape"])


@converter("Reshape", since=5)
def reshape(cx, ins, at):
    return reshape_to(cx, ins[0], cx.ints(ins[1], "shape"), bool(at.get("allowzero", 0)))


@converter("Flatten")
def flatten(cx, ins, at):
    x = ins[0]
    rank, axis = x.type.ndim, int(at.get("axis", 1))
    if not -rank <= axis <= rank:           # (Flatten's axis may be the rank itself)
        raise ShapeError(f"{cx.where()}: axis {axis} is out of range for a tensor of rank {rank} (Flatten allows "
                         f"{-rank} to {rank}); fix the model's axis")
    axis = axis + rank if axis < 0 else axis
    return cx.op("reshape", [x], shape=(numel(x.shape[:axis]), numel(x.shape[axis:])))


def _squeeze(cx, x, axes):
    nd = x.type.ndim
    axes = cx.axes(axes, nd) if axes else [d for d in range(nd) if x.shape[d] == 1]
    if any(x.shape[a] != 1 for a in axes):
        raise ShapeError(f"{cx.where()}: cannot squeeze axes {axes} of shape {list(x.shape)}")
    return cx.op("reshape", [x], shape=tuple(d for i, d in enumerate(x.shape) if i not in axes))


def _unsqueeze(cx, x, axes):
    nd = x.type.ndim + len(axes)
    axes = sorted(cx.axes(axes, nd))
    shape = list(x.shape)
    for a in axes:
        shape.insert(a, 1)
    return cx.op("reshape", [x], shape=tuple(shape))


converter("Squeeze")(lambda cx, ins, at: _squeeze(cx, ins[0], at.get("axes")))
converter("Squeeze", since=13)(lambda cx, ins, at: _squeeze(cx, ins[0], cx.ints(ins[1] if len(ins) > 1 else None,
                                                                                  "axes", True)))
converter("Unsqueeze")(lambda cx, ins, at: _unsqueeze(cx, ins[0], at["axes"]))
converter("Unsqueeze", since=13)(lambda cx, ins, at: _unsqueeze(cx, ins[0], cx.ints(ins[1], "axes")))  # 0-d too


@converter("Transpose")
def transpose(cx, ins, at):
    x = ins[0]
    perm = at.get("perm") or list(range(x.type.ndim))[::-1]
    if sorted(cx.axes(perm, x.type.ndim, "perm")) != list(range(x.type.ndim)):
        raise ShapeError(f"{cx.where()}: perm {list(perm)} is not a permutation of the {x.type.ndim} dims")
    return cx.op("permute", [x], dims=tuple(perm))


@converter("Concat")
def concat(cx, ins, at):
    xs = [x for x in ins if x is not None]
    return cx.op("cat", xs, dim=cx.axis(at["axis"], xs[0].type.ndim))


def slice_axis(cx, x, axis, start, end, step):
    """x[start:end:step] along `axis` with Python's (and ONNX's) clamping; a negative step flips."""
    idx = np.arange(x.shape[axis])[slice(start, end, step)]
    if len(idx) == 0:
        return cx.op("slice", [x], dim=axis, start=0, end=0, step=1)
    if step > 0:
        return cx.op("slice", [x], dim=axis, start=int(idx[0]), end=int(idx[-1]) + 1, step=step)
    part = cx.op("slice", [x], dim=axis, start=int(idx[-1]), end=int(idx[0]) + 1, step=-step)
    return cx.op("flip", [part], dims=(axis,))


def _slice(cx, x, starts, ends, axes, steps):
    nd = x.type.ndim
    axes = list(range(len(starts))) if axes is None else cx.axes(axes, nd)
    steps = [1] * len(starts) if steps is None else steps
    for s, e, a, st in zip(starts, ends, axes, steps):
        if st == 0:
            raise ShapeError(f"{cx.where()}: a step of 0")
        x = slice_axis(cx, x, a, s, e, st)
    return x


converter("Slice")(lambda cx, ins, at: _slice(cx, ins[0], at["starts"], at["ends"], at.get("axes"), None))
converter("Slice", since=10)(lambda cx, ins, at: _slice(
    cx, ins[0], cx.ints(ins[1], "starts"), cx.ints(ins[2], "ends"),
    cx.ints(ins[3], "axes") if len(ins) > 3 else None, cx.ints(ins[4], "steps") if len(ins) > 4 else None))


def _split(cx, x, axis, sizes, n_out):
    axis = cx.axis(axis, x.type.ndim)
    outputs = len(cx.node.output)
    if n_out != outputs or outputs < 1 or (sizes is not None and (len(sizes) != outputs or min(sizes) < 0)):
        raise ShapeError(f"{cx.where()}: {outputs} output(s), but num_outputs {n_out} and split {sizes} (ONNX: as "
                         f"many sizes, none negative, as outputs)")
    if sizes is None:
        n = x.shape[axis]
        chunk = -(-n // n_out)
        sizes = [min(chunk, n - i * chunk) for i in range(n_out)]
    if sum(sizes) != x.shape[axis]:
        raise ShapeError(f"{cx.where()}: split sizes {sizes} do not add up to {x.shape[axis]}")
    outs, at_ = [], 0
    for s in sizes:
        outs.append(cx.op("slice", [x], dim=axis, start=at_, end=at_ + s, step=1))
        at_ += s
    return tuple(outs)


converter("Split")(lambda cx, ins, at: _split(cx, ins[0], at.get("axis", 0), at.get("split") or (
    cx.ints(ins[1], "split") if len(ins) > 1 and ins[1] is not None else None), len(cx.node.output)))
converter("Split", since=13)(lambda cx, ins, at: _split(
    cx, ins[0], at.get("axis", 0), cx.ints(ins[1], "split") if len(ins) > 1 and ins[1] is not None else None,
    at.get("num_outputs", len(cx.node.output))))


@converter("Expand")
def expand(cx, ins, at):
    x = ins[0]
    want = tuple(cx.ints(ins[1], "shape"))
    if any(d < 0 for d in want):
        raise ShapeError(f"{cx.where()}: shape {list(want)} has a negative dim")
    shape = broadcast_shapes(x.shape, want)
    if x.type.ndim < len(shape):
        x = cx.op("reshape", [x], shape=(1,) * (len(shape) - x.type.ndim) + tuple(x.shape))
    return cx.op("expand", [x], size=shape)


@converter("Tile")
def tile(cx, ins, at):
    repeats = cx.ints(ins[1], "repeats")
    if len(repeats) != ins[0].type.ndim or any(r < 0 for r in repeats):
        raise ShapeError(f"{cx.where()}: repeats {repeats} must be {ins[0].type.ndim} values of at least 0, one "
                         f"per dim")
    return cx.op("repeat", [ins[0]], repeats=tuple(repeats))


_PAD_MODES = {"constant": "constant", "reflect": "reflect", "edge": "replicate", "wrap": "circular"}


def pad_nd(cx, x, pads, mode="constant", value=0.0):
    """ONNX pads ([begin of each axis..., end of each axis...]); negative pads crop."""
    nd = x.type.ndim
    if len(pads) != 2 * nd:
        raise ShapeError(f"{cx.where()}: {len(pads)} pads for a tensor of rank {nd} (ONNX: 2 * rank, begins then "
                         f"ends)")
    begins, ends = pads[:nd], pads[nd:]
    if any(x.shape[a] + min(begins[a], 0) + min(ends[a], 0) < 0 for a in range(nd)):
        raise ShapeError(f"{cx.where()}: pads {list(pads)} crop more than the shape {list(x.shape)} holds")
    for a in range(nd):            # crop first
        if begins[a] < 0 or ends[a] < 0:
            b0, e0 = max(-begins[a], 0), max(-ends[a], 0)
            x = cx.op("slice", [x], dim=a, start=b0, end=x.shape[a] - e0, step=1)
    torch_pad = []
    for a in reversed(range(nd)):
        torch_pad += [max(begins[a], 0), max(ends[a], 0)]
    while torch_pad and torch_pad[-2:] == [0, 0]:
        torch_pad = torch_pad[:-2]
    if not torch_pad:
        return x
    if mode not in _PAD_MODES:
        raise cx.unsupported(f"Pad mode {mode!r}")
    if mode == "constant":
        return cx.op("pad", [x], pad=tuple(torch_pad), value=value, mode="constant")
    return cx.op("pad", [x], pad=tuple(torch_pad), mode=_PAD_MODES[mode])


@converter("Pad", since=2)
def pad_2(cx, ins, at):
    return pad_nd(cx, ins[0], list(at["pads"]), at.get("mode", "constant"), float(at.get("value", 0.0)))


@converter("Pad", since=11)
def pad(cx, ins, at):
    x = ins[0]
    pads = cx.ints(ins[1], "pads")
    value = cx.const(ins[2], "constant_value") if len(ins) > 2 and ins[2] is not None else None
    value = 0 if value is None else value.reshape(-1)[0].item()
    if len(ins) > 3 and ins[3] is not None:
        axes = cx.axes(cx.ints(ins[3], "axes"), x.type.ndim)
        if len(pads) != 2 * len(axes):
            raise ShapeError(f"{cx.where()}: {len(pads)} pads for {len(axes)} axes (ONNX: 2 per axis)")
        full = [0] * (2 * x.type.ndim)
        for i, a in enumerate(axes):
            full[a], full[x.type.ndim + a] = pads[i], pads[len(axes) + i]
        pads = full
    mode = at.get("mode", "constant")
    mode = mode.decode() if isinstance(mode, bytes) else mode
    return pad_nd(cx, x, pads, mode, value)


# -- indexing --------------------------------------------------------------------------------------------------
def _nonneg(cx, idx, n, checked: bool = True):
    """Indices with negative ones counted from the end (constants at once; checked: a constant index outside [-n,
    n) is an IndexOutOfRangeError naming the node, as onnx's reference evaluator raises IndexError)."""
    if idx.is_const:
        bad = idx.data[(idx.data < -n) | (idx.data >= n)] if checked else ()
        if len(bad):
            raise IndexOutOfRangeError(f"{cx.where()}: index {int(bad[0])} is out of range for a dim of size {n}; "
                                       f"keep the model's indices in range")
        return cx.b.const(np.where(idx.data < 0, idx.data + n, idx.data).astype(np.int64))
    idx = cx.op("cast", [idx], dtype="int64") if idx.dtype != "int64" else idx
    return cx.op("where", [cx.op("lt", [idx, 0]), cx.op("add", [idx, n]), idx])


@converter("Gather")
def gather(cx, ins, at):
    x, idx = ins
    axis = cx.axis(at.get("axis", 0), x.type.ndim)
    return cx.op("index", [x, _nonneg(cx, idx, x.shape[axis])], dims=(axis,))


@converter("GatherElements")
def gather_elements(cx, ins, at):
    x, idx = ins
    axis = cx.axis(at.get("axis", 0), x.type.ndim)
    return cx.op("gather", [x, _nonneg(cx, idx, x.shape[axis])], dim=axis)


@converter("GatherND")
def gather_nd(cx, ins, at):
    x, idx = ins
    bd = int(at.get("batch_dims", 0))
    k = idx.shape[-1]
    lead = idx.shape[:-1]
    parts = []
    for d in range(bd):         # the batch coordinates, broadcast over the index rows
        iota = np.arange(x.shape[d], dtype=np.int64).reshape([-1 if i == d else 1 for i in range(len(lead))])
        parts.append(cx.b.const(np.broadcast_to(iota, lead).copy()))
    for j in range(k):
        col = cx.op("reshape", [cx.op("slice", [idx], dim=idx.type.ndim - 1, start=j, end=j + 1, step=1)],
                    shape=lead)
        parts.append(_nonneg(cx, col, x.shape[bd + j]))
    out = cx.op("index", [x] + parts, dims=tuple(range(bd + k)))
    return out


@converter("ScatterElements", since=11)
def scatter_elements(cx, ins, at):
    x, idx, upd = ins
    axis = cx.axis(at.get("axis", 0), x.type.ndim)
    idx = _nonneg(cx, idx, x.shape[axis])
    red = at.get("reduction", "none")
    red = red.decode() if isinstance(red, bytes) else red
    if red == "none":
        return cx.op("scatter", [x, idx, upd], dim=axis)
    reduce = {"add": "sum", "mul": "prod", "max": "amax", "min": "amin"}.get(red)
    if reduce is None:
        raise cx.unsupported(f"reduction {red!r}")
    return cx.op("scatter", [x, idx, upd], dim=axis, reduce=reduce, include_self=True)


converter("Scatter", since=9)(scatter_elements)


@converter("ScatterND", since=11)
def scatter_nd(cx, ins, at):
    x, idx, upd = ins
    red = at.get("reduction", "none")
    k = idx.shape[-1]
    cols = [_nonneg(cx, cx.op("reshape", [cx.op("slice", [idx], dim=idx.type.ndim - 1, start=j, end=j + 1,
                                                  step=1)], shape=idx.shape[:-1]), x.shape[j]) for j in range(k)]
    if red in ("none", "add"):
        return cx.op("index_put", [x, upd] + cols, dims=tuple(range(k)), accumulate=red == "add")
    reduce = {"mul": "prod", "max": "amax", "min": "amin"}.get(red)
    if reduce is None:
        raise cx.unsupported(f"reduction {red!r}")
    # as ScatterElements over x's first k dims flattened: row = the index tuple's linear offset
    rows, rest = int(np.prod(x.shape[:k], dtype=np.int64)), tuple(x.shape[k:])
    stride = np.cumprod((x.shape[1:k] + (1,))[::-1])[::-1]
    lin = cols[0] if k == 1 else None
    for j in range(k):
        term = cx.op("mul", [cols[j], int(stride[j])])
        lin = term if j == 0 else cx.op("add", [lin, term])
    m = int(np.prod(idx.shape[:-1], dtype=np.int64))
    lin = cx.op("expand", [cx.op("reshape", [lin], shape=(m,) + (1,) * len(rest))], size=(m,) + rest)
    out = cx.op("scatter", [cx.op("reshape", [x], shape=(rows,) + rest), lin,
                            cx.op("reshape", [upd], shape=(m,) + rest)], dim=0, reduce=reduce, include_self=True)
    return cx.op("reshape", [out], shape=x.shape)


@converter("Trilu")
def trilu(cx, ins, at):
    x = ins[0]
    k = cx.one_int(ins[1], "k") if len(ins) > 1 and ins[1] is not None else 0
    r, c = x.shape[-2:]
    rows, cols = np.arange(r)[:, None], np.arange(c)[None, :]
    keep = (cols - rows >= k) if at.get("upper", 1) else (cols - rows <= k)
    return cx.op("where", [cx.b.const(keep), x, cx.scalar(0, x.dtype)])


@converter("OneHot", since=9)
def one_hot(cx, ins, at):
    idx, depth, values = ins
    depth = cx.one_int(depth, "depth")
    cx.table(depth, "depth")
    nd = idx.type.ndim + 1
    axis = cx.axis(at.get("axis", -1), nd)
    if idx.dtype not in ("int32", "int64"):
        idx = cx.op("cast", [idx], dtype="int64")
    idx = _nonneg(cx, idx, depth, checked=False)      # (an index past depth gives a row of off values)
    idx = _unsqueeze(cx, idx, [axis])
    iota = np.arange(depth, dtype=idx.dtype).reshape([-1 if d == axis else 1 for d in range(nd)])
    hot = cx.op("eq", [idx, cx.b.const(iota)])
    off = cx.op("reshape", [cx.op("slice", [values], dim=0, start=0, end=1, step=1)], shape=())
    on = cx.op("reshape", [cx.op("slice", [values], dim=0, start=1, end=2, step=1)], shape=())
    return cx.op("where", [hot, on, off])


@converter("CumSum", since=11)
def cumsum(cx, ins, at):
    x = ins[0]
    axis = cx.axis(cx.one_int(ins[1], "axis"), x.type.ndim)
    if at.get("reverse", 0):
        x = cx.op("flip", [x], dims=(axis,))
    y = cx.op("cumsum", [x], dim=axis)
    if at.get("exclusive", 0):
        pads = [0] * (2 * x.type.ndim)
        pads[axis] = 1
        pads[x.type.ndim + axis] = -1
        y = pad_nd(cx, y, pads)
    return cx.op("flip", [y], dims=(axis,)) if at.get("reverse", 0) else y


@converter("DepthToSpace")
def depth_to_space(cx, ins, at):
    x = ins[0]
    bs = int(at["blocksize"])
    n, c, h, w = x.shape
    mode = at.get("mode", "DCR")
    mode = mode.decode() if isinstance(mode, bytes) else mode
    if mode == "DCR":
        t = cx.op("permute", [cx.op("reshape", [x], shape=(n, bs, bs, c // bs ** 2, h, w))], dims=(0, 3, 4, 1, 5, 2))
    else:
        t = cx.op("permute", [cx.op("reshape", [x], shape=(n, c // bs ** 2, bs, bs, h, w))], dims=(0, 1, 4, 2, 5, 3))
    return cx.op("reshape", [t], shape=(n, c // bs ** 2, h * bs, w * bs))


@converter("SpaceToDepth")
def space_to_depth(cx, ins, at):
    x = ins[0]
    bs = int(at["blocksize"])
    n, c, h, w = x.shape
    t = cx.op("reshape", [x], shape=(n, c, h // bs, bs, w // bs, bs))
    crd = (at.get("mode") or "DCR") == "CRD"
    t = cx.op("permute", [t], dims=(0, 1, 3, 5, 2, 4) if crd else (0, 3, 5, 1, 2, 4))
    return cx.op("reshape", [t], shape=(n, c * bs * bs, h // bs, w // bs))


@converter("TopK", since=10)
def top_k(cx, ins, at):
    x = ins[0]
    k = cx.one_int(ins[1], "k")
    if not 0 <= k <= x.shape[cx.axis(at.get("axis", -1), x.type.ndim)]:
        raise ShapeError(f"{cx.where()}: k {k} is not between 0 and the axis' size")
    axis = cx.axis(at.get("axis", -1), x.type.ndim)
    vals, idx = cx.aten("aten.topk.default", x, k, axis, bool(at.get("largest", 1)), True)
    return vals, idx


@converter("ReverseSequence")
def reverse_sequence(cx, ins, at):
    x, lens = ins
    lens = cx.ints(lens, "sequence_lens")
    t_axis, b_axis = int(at.get("time_axis", 0)), int(at.get("batch_axis", 1))
    if {t_axis, b_axis} != {0, 1} or x.type.ndim < 2:
        raise ShapeError(f"{cx.where()}: time_axis {t_axis} and batch_axis {b_axis} must be 0 and 1 (or 1 and 0) "
                         f"of a tensor of rank 2 or more, rank {x.type.ndim} given")
    idx = np.broadcast_to(np.arange(x.shape[t_axis]).reshape([-1 if d == t_axis else 1 for d in range(x.type.ndim)]),
                          x.shape).copy()
    for bi, n in enumerate(lens):
        sel = [slice(None)] * x.type.ndim
        sel[b_axis], sel[t_axis] = bi, slice(0, n)
        idx[tuple(sel)] = np.flip(idx[tuple(sel)], axis=t_axis - (b_axis < t_axis))
    return cx.op("gather", [x, cx.b.const(idx.astype(np.int64))], dim=t_axis)


@converter("Compress", since=9)
def compress(cx, ins, at):
    x, cond = ins
    keep = np.nonzero(cx.const(cond, "condition"))[0]
    if "axis" not in at:
        x, axis = cx.op("reshape", [x], shape=(int(np.prod(x.shape)),)), 0
    else:
        axis = cx.axis(at["axis"], x.type.ndim)
    keep = keep[keep < x.shape[axis]]
    return cx.op("index", [x, cx.b.const(keep.astype(np.int64))], dims=(axis,))


@converter("NonZero", since=9)
def non_zero(cx, ins, at):
    return cx.b.const(np.array(np.nonzero(cx.const(ins[0], "input")), dtype=np.int64))
