"""eliminate_common_subexpr: takes a Graph, returns it with each repeated computation (same op, inputs and attrs)
made once."""


def eliminate_common_subexpr(g, ctx):
    """Nodes with the same op, inputs and attrs compute the same values: keep the first."""
    seen, replace, kept = {}, {}, []
    for n in g.nodes:
        n.inputs = [replace.get(v.id, v) for v in n.inputs]
        key = (n.op, tuple(v.id if not v.is_const or v.data.size > 16 else
                           ("c", v.dtype, v.shape, v.data.tobytes()) for v in n.inputs),
               tuple(sorted(n.attrs.items())))
        first = seen.get(key)
        if first is None:
            seen[key] = n
            kept.append(n)
        else:
            replace.update({o.id: f for o, f in zip(n.outputs, first.outputs)})
    g.nodes = kept
    g.outputs = [replace.get(v.id, v) for v in g.outputs]
    return g
