def simplify(g):
    """Remove no-op nodes (rules, one per line): cast to own dtype, reshape to own shape, copy of an
    intermediate (outputs are materialized later by materialize_outputs)."""
    replace, kept = {}, []
    for n in g.nodes:
        n.inputs = [replace.get(v.id, v) for v in n.inputs]
        x = n.inputs[0] if n.inputs else None
        noop = (
            (n.op == "cast" and x.dtype == n.outputs[0].dtype)                      # cast(x: T, T) -> x
            or (n.op == "reshape" and x.shape == n.outputs[0].shape)                # reshape(x, x.shape) -> x
            or (n.op == "copy")                                                     # copy(x) -> x
        )
        if noop:
            replace[n.outputs[0].id] = x
        else:
            kept.append(n)
    g.nodes = kept
    g.outputs = [replace.get(v.id, v) for v in g.outputs]
    return g
