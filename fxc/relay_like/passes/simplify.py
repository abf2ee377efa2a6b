"""simplify: takes a typed Graph, returns it without no-op nodes and with reshapes moved out of fusion's way."""
from ...ops.registry import Kind, get_op
from ..graph import Node, TensorType


def simplify(g, ctx):
    """Remove no-op nodes and move reshapes out of the way of fusion (rules, one per line):
    cast to own dtype, reshape to own shape, a pad by nothing, a slice of everything, copy of an intermediate
    (outputs are materialized later by materialize_outputs); reshape of a reshape reads the first one's input;
    an elementwise op of a reshape (its only reader; other operands of the same shape, or broadcasting ones,
    reshaped too) runs before the reshape, so `linear -> view -> gelu -> view` becomes `linear -> gelu` and the
    activation (or a residual add) joins the GEMM's epilogue."""
    replace, kept = {}, []
    readers = {vid: len(us) for vid, us in g.users().items()}     # kept current as inputs are rewired
    out_ids = {v.id for v in g.outputs}
    for n in g.nodes:
        n.inputs = [replace.get(v.id, v) for v in n.inputs]
        x = n.inputs[0] if n.inputs else None
        if n.op == "reshape" and x.node is not None and x.node.op == "reshape":
            n.inputs = [x.node.inputs[0]]                                       # reshape(reshape(x)) -> reshape(x)
            readers[x.id] -= 1
            x = n.inputs[0]
            readers[x.id] = readers.get(x.id, 0) + 1
        noop = (
            (n.op == "cast" and x.dtype == n.outputs[0].dtype)                      # cast(x: T, T) -> x
            or (n.op in ("reshape", "expand") and x.shape == n.outputs[0].shape)    # reshape(x, x.shape) -> x
            or (n.op == "copy")                                                     # copy(x) -> x
            or (n.op == "pad" and not any(n.attrs["pad"]))                          # pad(x, 0...) -> x
            or (n.op == "slice" and x.shape == n.outputs[0].shape                   # x[0:n] -> x
                and n.attrs.get("start", 0) in (0, None) and n.attrs.get("step", 1) == 1)
        )
        if noop:
            replace[n.outputs[0].id] = x
            readers[x.id] = readers.get(x.id, 0) - 1 + readers.get(n.outputs[0].id, 0)
            continue
        r = _reshaped_operand(n, readers, out_ids)
        if r is not None:                                                       # f(reshape(x), y) -> reshape(f(x, y'))
            kept.pop(next(i for i in range(len(kept) - 1, -1, -1) if kept[i] is r))
            x, shape = r.inputs[0], r.outputs[0].shape
            ins = []
            for v in n.inputs:
                if v is r.outputs[0]:
                    v = x
                elif v.shape == shape or v.type.ndim > x.type.ndim:             # reshaped too (see _reshaped_operand)
                    to = x.shape if v.shape == shape else v.shape[v.type.ndim - x.type.ndim:]
                    rv = Node("reshape", [v], {"shape": to}, [TensorType(to, v.dtype)])
                    kept.append(rv)
                    v = rv.outputs[0]
                ins.append(v)
            f = Node(n.op, ins, n.attrs, get_op(n.op).infer([v.type for v in ins], **n.attrs))
            out = n.outputs[0]
            r.inputs = [f.outputs[0]]
            r.outputs[0] = out
            out.node, out.index = r, 0
            kept += [f, r]
            continue
        kept.append(n)
    g.nodes = kept
    g.outputs = [replace.get(v.id, v) for v in g.outputs]
    return g


def _reshaped_operand(n, readers, out_ids):
    """The reshape node whose output is an operand of n, when n is elementwise at that shape and the reshape's
    only reader, and every other operand has that shape, or is a scalar, or (when the reshape only adds leading 1s)
    broadcasts against the reshape's input; else None."""
    if len(n.outputs) != 1 or get_op(n.op).kind > Kind.BROADCAST:
        return None
    scalars = [v for v in n.inputs if v.is_const and v.type.numel == 1]
    tensors = [v for v in n.inputs if all(v is not c for c in scalars)]
    v = next((t for t in tensors if t.node is not None and t.node.op == "reshape"), None)
    if v is None or v.id in out_ids or readers.get(v.id) != 1 or n.outputs[0].shape != v.shape:
        return None
    x = v.node.inputs[0]
    lead = v.type.ndim - x.type.ndim
    unit_lead = lead >= 0 and v.shape == (1,) * lead + x.shape     # the reshape only adds leading 1s

    def fits(t):    # t broadcasts against x once its dims beyond x's rank (all 1) are dropped
        extra = t.shape[:max(t.type.ndim - x.type.ndim, 0)]
        return t.shape == v.shape or (all(d == 1 for d in extra) and (unit_lead or t.type.numel == 1))
    return v.node if all(fits(t) for t in n.inputs) else None
