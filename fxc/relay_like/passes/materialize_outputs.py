"""materialize_outputs: takes a Graph, returns it with a node making every graph output into a buffer of its own."""
from ..graph import Node


def materialize_outputs(g, ctx):
    """Every graph output gets its own freshly computed buffer: outputs that are graph inputs,
    constants, or repeated get a copy node."""
    seen, outs = set(), []
    produced = {o.id for n in g.nodes for o in n.outputs}
    for v in g.outputs:
        if v.id not in produced or v.id in seen:
            n = Node("copy", [v], {}, [v.type])
            g.nodes.append(n)
            v = n.outputs[0]
        seen.add(v.id)
        outs.append(v)
    g.outputs = outs
    return g
