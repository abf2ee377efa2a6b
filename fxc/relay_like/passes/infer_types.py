"""infer_types: every node's types checked against its op's type rule. Takes and returns a typed Graph (unchanged;
a ShapeError where a recorded type disagrees)."""
from ...errors import ShapeError
from ...ops.registry import get_op


def infer_types(g, ctx):
    """Re-run every op's type rule and check it agrees with the types already recorded."""
    for n in g.nodes:
        types = get_op(n.op).infer([v.type for v in n.inputs], **n.attrs)
        if [o.type for o in n.outputs] != list(types):
            raise ShapeError(f"node {n.name}: recorded types {[o.type for o in n.outputs]} but {n.op}'s "
                             f"rule gives {types}")
    return g
