"""fold_constants: takes a typed Graph, returns it with the nodes over constants only evaluated into constants.

`folds` is the one rule of what is evaluated at compile time, for this pass and for the frontends that fold as they
build (the ONNX builder): a node over constants folds unless it would make a constant bigger than MAX_FOLD_ELEMENTS
and than every input; such a node stays in the graph and is computed at run time (inlined into its readers: a
`ConstantOfShape [2**27]` + x is one kernel, not a 512 MiB constant in the module, the cache and the artifact).
"""
import numpy as np

from ...errors import FxcError, ShapeError
from ...ops.registry import get_op
from ..graph import Value

MAX_FOLD_ELEMENTS = 1 << 20     # elements: the largest constant a fold may make (4 MiB of float32)


def folds(n) -> bool:
    """True if node n, whose inputs are all constants, is evaluated now (see the module docstring)."""
    if any(o.type.symbolic for o in n.outputs):     # (a slice [:s] of a constant has a symbolic size)
        return False
    if any(o.dtype in ("float16", "bfloat16") for o in n.outputs):     # no such numpy constants
        return False
    biggest = max((v.type.numel for v in n.inputs), default=0)
    return all(o.type.numel <= max(MAX_FOLD_ELEMENTS, biggest) for o in n.outputs) \
        or n.op in ("pack_lanes", "winograd_weight")                                # (frozen weights)


def evaluate(n, where: str | None = None) -> list:
    """The constants node n computes (its op's numpy reference over its inputs' data); an error the reference
    raises is a ShapeError naming the node (where: the frontend's name of it)."""
    try:
        res = get_op(n.op).reference(*[v.data for v in n.inputs], **n.attrs)
    except (FxcError, ArithmeticError, IndexError, ValueError, MemoryError) as e:
        name = where or f"node {n.name}"
        raise ShapeError(f"{name}: evaluating {n.op} over its constant inputs failed: {type(e).__name__}: {e}") from e
    res = res if isinstance(res, (tuple, list)) else (res,)
    return [np.ascontiguousarray(_as_dtype(np.asarray(r), o.dtype)).reshape(o.shape) for o, r in zip(n.outputs, res)]


def _as_dtype(a: np.ndarray, dtype: str) -> np.ndarray:
    """A folded result in its output's dtype; a symbolic shape value (an ONNX Shape of a tensor with a named dim:
    int64 data holding size expressions, object dtype) stays one."""
    if a.dtype == object and dtype == "int64":
        return a
    return a.astype(dtype if dtype != "bool" else np.bool_)


def fold_constants(g, ctx):
    """Evaluate nodes whose inputs are all constants with the op's numpy reference where `folds` says so (a
    broadcast stays inlined in its reader instead of becoming a stored copy). Weights are graph inputs (not
    constants) unless the user froze them, so training still sees updates."""
    replace, kept = {}, []
    for n in g.nodes:
        n.inputs = [replace.get(v.id, v) for v in n.inputs]
        if n.inputs and all(v.is_const for v in n.inputs) and folds(n):
            for o, r in zip(n.outputs, evaluate(n)):
                replace[o.id] = Value(o.type, data=r)
        else:
            kept.append(n)
    g.nodes = kept
    g.outputs = [replace.get(v.id, v) for v in g.outputs]
    for n in g.nodes:
        if n.op == "index" and not n.attrs.get("in_range"):
            _bound_constant_indices(n)
    return g


def _bound_constant_indices(n):
    """An index whose index tensors are all constants within [-size, size) (an interpolation's, a take's): the
    negative ones wrapped now, and the node marked in_range, so its kernel loads them without the per-element
    wrap and clamp a data-dependent index needs (a bilinear upsample 1.76 -> 1.0 ms, a bicubic one 12.6 -> 6.3)."""
    x, idx = n.inputs[0], n.inputs[1:]
    if not all(v.is_const for v in idx):
        return
    wrapped = []
    for v, d in zip(idx, n.attrs["dims"]):
        size = x.shape[d]
        if v.data.size and (v.data.min() < -size or v.data.max() >= size):
            return
        wrapped.append(Value(v.type, data=np.where(v.data < 0, v.data + size, v.data).astype(v.data.dtype))
                       if v.data.size and v.data.min() < 0 else v)
    n.inputs = [x] + wrapped
    n.attrs = dict(n.attrs, in_range=True)
