"""Symbolic sizes of a captured PyTorch graph: which placeholder dims stay size symbols (fxc/symbolic/sym.py).

Dynamo (`dynamic=True`, `mark_dynamic`) and torch.export (`dynamic_shapes`) give placeholders FakeTensor metadata
whose dims are SymInts; `symbolic_placeholders` turns them into `Sym`s and their facts into `SymInfo`s.
"""
from __future__ import annotations

import torch

from ...errors import UnsupportedOpError
from ...symbolic.expr import INT_MAX, Sym
from ...symbolic.sym import SymInfo, canonical


def _meta(node):
    return node.meta.get("val", node.meta.get("example_value"))


def symbolic_placeholders(gm, specialize: bool = True, names: dict | None = None):
    """(per placeholder: its tensor shape with a `Sym` for each symbolic dim, or its symbolic int value, or None;
    {symbol name: SymInfo}) from the FakeTensor metadata Dynamo gives a graph traced with dynamic sizes; None
    when every size is static. A symbol's range is the shape environment's (Dynamo's dynamic sizes are >= 2).
    With specialize (torch.compile) one symbol stays symbolic (_row_symbol); the others are specialised (None: the
    argument's size at each call). Without (fxc.from_torch: a build that must serve every size) all stay symbolic.
    names: {shape environment's symbol ("s77"): the name to give it} (the user's Dim("batch"): `dim_names`)."""
    infos, out = {}, []
    names = names or {}

    def symbol(expr, env):
        name = names.get(str(expr), str(expr))
        if name not in infos:
            vr = env.var_to_range.get(expr)
            lo, hi = (2, INT_MAX) if vr is None else (int(vr.lower), vr.upper)
            hi = int(hi) if getattr(hi, "is_finite", True) and hi != float("inf") and str(hi) != "int_oo" \
                else INT_MAX
            infos[name] = SymInfo(name, max(lo, 1), min(hi, INT_MAX))
        return Sym(name)

    def poly(expr, env):    # a scalar that is a polynomial of symbols (a partition's s0*s1 for a view's size)
        if getattr(expr, "is_Integer", False):
            return int(expr)
        if getattr(expr, "is_Symbol", False):
            return symbol(expr, env)
        if getattr(expr, "is_Add", False) or getattr(expr, "is_Mul", False):
            parts = [poly(a, env) for a in expr.args]
            out = parts[0]
            for p in parts[1:]:
                out = out + p if expr.is_Add else out * p
            return out
        if getattr(expr, "is_Pow", False) and getattr(expr.exp, "is_Integer", False) and int(expr.exp) > 0:
            base, out = poly(expr.base, env), None
            for _ in range(int(expr.exp)):
                out = base if out is None else out * base
            return out
        raise UnsupportedOpError(f"placeholder size {expr} is not a polynomial of symbols")

    def dim(d, scalar=False):
        if isinstance(d, int):
            return d
        expr = d.node.expr
        if getattr(expr, "is_number", False):       # a SymInt Dynamo knows the value of (a head dim of 256)
            return int(expr)
        if not getattr(expr, "is_Symbol", False):
            if not specialize:      # a partition's input after a cat of a growing cache: [1, 4, s0 + 1, 32]
                return canonical(poly(expr, d.node.shape_env))
            raise UnsupportedOpError(f"placeholder size {expr} is an expression of symbols")
        return symbol(expr, d.node.shape_env)

    try:
        for n in gm.graph.nodes:
            if n.op != "placeholder":
                continue
            m = _meta(n)
            if isinstance(m, torch.Tensor):
                out.append(tuple(dim(d) for d in m.shape))
            elif isinstance(m, torch.SymInt):
                out.append(dim(m, scalar=True))
            else:
                out.append(None)
    except UnsupportedOpError:
        if not specialize:
            raise
        return None
    except Exception:       # noqa: BLE001  (metadata of another form: the partition builds per size, as before)
        if not specialize:
            raise
        return None
    if not specialize:      # every declared dim stays symbolic (a batch and a sequence: lowering/sym_loops.py)
        return (out, infos) if infos else None
    rows = _row_symbol(out)
    if rows is None:
        return None
    keep = {rows.name: infos[rows.name]}

    def only_rows(d):       # the other symbols: their sizes at each call (a build per value, as static sizes)
        return d if not isinstance(d, Sym) or d is rows else None
    out = [tuple(map(only_rows, x)) if isinstance(x, tuple) else only_rows(x) for x in out]
    return out, keep


def symbolic_tries(gm) -> list:
    """What torch.compile tries, in order, for a graph with symbolic sizes: every symbol kept symbolic (a batch and a
    sequence, a KV cache's length wherever it is: one build for every size), then the row symbol only (the others
    specialised), as `symbolic_placeholders(gm)`. Each entry is (per placeholder shapes, {name: SymInfo}); [] when
    sizes are static."""
    row = symbolic_placeholders(gm)
    try:
        every = symbolic_placeholders(gm, specialize=False)
    except Exception:       # noqa: BLE001  (metadata the full form cannot take: the row symbol alone)
        every = None
    tries = [every] if every is not None and (row is None or every[1].keys() != row[1].keys()) else []
    return tries + ([row] if row is not None else [])


def _row_symbol(shapes):
    """The symbol kept symbolic: the first that is only ever the leading dim of a placeholder (after dims of 1:
    the batch of an image, the sequence of a batch-1 token list), or None."""
    lead, other = [], set()
    for shape in shapes:
        if not isinstance(shape, tuple):
            continue
        k = next((i for i, d in enumerate(shape) if d != 1), None)
        for i, d in enumerate(shape):
            if isinstance(d, Sym):
                (lead.append(d) if i == k else other.add(d))
    return next((s for s in lead if s not in other), None)


def dim_names(gm, dynamic_shapes) -> dict:
    """{shape environment's symbol: the user's name} for the dims torch.export's `dynamic_shapes` names with a
    torch.export.Dim("batch"), the user inputs being the graph's first placeholders in order; names that are not
    identifiers, or that two different symbols would share, are left out (the symbol keeps its own)."""
    per_input = dynamic_shapes.values() if isinstance(dynamic_shapes, dict) else dynamic_shapes or ()
    metas = [_meta(n) for n in gm.graph.nodes if n.op == "placeholder"]
    out: dict = {}
    for m, spec in zip(metas, per_input):
        dims = spec.items() if isinstance(spec, dict) else enumerate(spec or ())
        for d, dim in dims:
            name = getattr(dim, "__name__", None)
            if not isinstance(m, torch.Tensor) or not isinstance(name, str) or not name.isidentifier() \
                    or d >= m.dim() or not isinstance(m.shape[d], torch.SymInt):
                continue
            expr = m.shape[d].node.expr
            if getattr(expr, "is_Symbol", False):
                out[str(expr)] = name
    taken = list(out.values())
    return {k: v for k, v in out.items() if taken.count(v) == 1}
