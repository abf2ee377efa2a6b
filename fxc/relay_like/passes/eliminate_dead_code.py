"""eliminate_dead_code: takes a Graph, returns it without the nodes that reach no graph output."""


def eliminate_dead_code(g, ctx):
    """Drop nodes none of whose outputs reach a graph output."""
    live = {v.id for v in g.outputs}
    kept = []
    for n in reversed(g.nodes):
        if any(o.id in live for o in n.outputs):
            kept.append(n)
            live.update(v.id for v in n.inputs)
    g.nodes = kept[::-1]
    return g
