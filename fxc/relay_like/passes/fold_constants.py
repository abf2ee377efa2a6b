import numpy as np

from ...ops.registry import get_op
from ..graph import Value

MAX_FOLD_ELEMENTS = 1 << 20


def fold_constants(g):
    """Evaluate nodes whose inputs are all constants with the op's numpy reference, unless the result is a constant
    bigger than MAX_FOLD_ELEMENTS and than every input (a broadcast stays inlined in its reader instead of becoming a
    stored copy). Weights are graph inputs (not constants) unless the user froze them, so training still sees
    updates."""
    replace, kept = {}, []
    for n in g.nodes:
        n.inputs = [replace.get(v.id, v) for v in n.inputs]
        biggest = max((v.type.numel for v in n.inputs), default=0)
        small = (all(o.type.numel <= max(MAX_FOLD_ELEMENTS, biggest) for o in n.outputs)    # no constant grows
                 or n.op in ("pack_lanes", "winograd_weight"))                              # (frozen weights)
        storage = any(o.dtype in ("float16", "bfloat16") for o in n.outputs)   # no such numpy constants
        if n.inputs and all(v.is_const for v in n.inputs) and small and not storage:
            res = get_op(n.op).reference(*[v.data for v in n.inputs], **n.attrs)
            res = res if isinstance(res, tuple) else (res,)
            for o, r in zip(n.outputs, res):
                r = np.ascontiguousarray(np.asarray(r).astype(o.dtype if o.dtype != "bool" else np.bool_))
                replace[o.id] = Value(o.type, data=r.reshape(o.shape))
        else:
            kept.append(n)
    g.nodes = kept
    g.outputs = [replace.get(v.id, v) for v in g.outputs]
    return g
