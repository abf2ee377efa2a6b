"""`fxc ops --frontend torch|onnx|mxnet [--target T]`: every op the frontend converts, the registry ops it becomes,
and with a target whether those compile there — before a model is compiled.

Takes the frontend's converter table (torch: the ATen table of the op registry; onnx: capture/onnx/table.py, with
the opset each converter starts at; mxnet: capture/mxnet/ops.py CONVERTERS) and, for a target, the op registry: each
registry op's first sample is built for the target (fxc.driver.build: passes, lowering, the target's code and its
device compile), once per op (llvm builds come from the module cache afterwards). The registry ops a converter
becomes are the op names and ATen overloads its code names (a composition of several ops lists them all; a converter
shared by several frontend ops, such as ONNX's Reduce*, lists the ops of all of them); a row compiles on the target
when every one of them does. Produces rows and the lines the CLI prints.
"""
from __future__ import annotations

import numpy as np

from ..driver.build import build
from ..driver.progress import Progress
from ..errors import FxcError
from ..ops.registry import all_ops, aten_table
from ..relay_like.builder import Builder

FRONTENDS = ("torch", "onnx", "mxnet")


def _names_in(fn, ops: dict, aten: dict, key: str = "", seen=None) -> set:
    """The registry ops a converter's code names: string constants that are op names or ATen overloads (their
    ops), through nested functions, closures (a converter made by a factory: `_arg("argmax")`), the module's
    functions it calls and the module's tables it looks `key` (the frontend op) up in (`_UNARY["Abs"]`)."""
    seen = set() if seen is None else seen
    if isinstance(fn, str):         # an op's name, or an ATen overload: its op, or what its composition names
        if fn in ops:
            return {fn}
        op, conv = aten.get(fn, (None, None))
        return ({op.name} if op is not None else set()) | (_names_in(conv, ops, aten, key, seen) if conv else set())
    if isinstance(fn, (tuple, list)):       # a table's entry: (op name, ...)
        return set().union(*(_names_in(x, ops, aten, key, seen) for x in fn))
    code = getattr(fn, "__code__", None)
    if code is None or id(code) in seen:
        return set()
    seen.add(id(code))
    found = set()
    glob = getattr(fn, "__globals__", {})

    def scan(c):
        for k in c.co_consts:
            if isinstance(k, str):
                found.update(_names_in(k, ops, aten, key, seen))
            elif hasattr(k, "co_consts"):
                scan(k)
        for name in c.co_names:
            g = glob.get(name)
            if isinstance(g, dict) and key in g:
                found.update(_names_in(g[key], ops, aten, key, seen))
            elif callable(g) and getattr(g, "__module__", None) == fn.__module__:
                found.update(_names_in(g, ops, aten, key, seen))
    scan(code)
    for default in getattr(fn, "__defaults__", None) or ():     # (lambda cx, ins, at, f=_reduce(kind): ...)
        found |= _names_in(default, ops, aten, key, seen)
    for cell in fn.__closure__ or ():
        try:
            found |= _names_in(cell.cell_contents, ops, aten, key, seen)
        except ValueError:          # an empty cell
            continue
    return found


def frontend_rows(frontend: str) -> list:
    """(frontend op, note, sorted registry op names) for every op the frontend converts."""
    ops, aten = all_ops(), aten_table()
    if frontend == "torch":
        rows = []
        for name, (op, conv) in sorted(aten.items()):
            used = {op.name} if op is not None else set()
            used |= _names_in(conv, ops, aten, name) if conv is not None else set()
            rows.append((name, "", sorted(used)))
        return rows
    if frontend == "onnx":
        from ..capture.onnx.table import table  # deferred: imports onnx (optional); the package registers them all
        return [(op_type, f"opset {entries[0][0]}+", sorted(set().union(*(_names_in(fn, ops, aten, op_type)
                                                                            for _, fn in entries))))
                for op_type, entries in table().items()]
    if frontend == "mxnet":
        from ..capture.mxnet.ops import CONVERTERS  # deferred: the MXNet converters (no MXNet import)
        return [(name, "", sorted(_names_in(fn, ops, aten, name))) for name, fn in sorted(CONVERTERS.items())]
    raise FxcError(f"unknown frontend {frontend!r}; valid: {', '.join(FRONTENDS)}")


def op_compiles(name: str, target: str) -> str | None:
    """None when the first sample of registry op `name` builds for `target`, else why not (the error's first
    line). An op without samples counts as compiling (it is checked by the ops that compose it)."""
    op = all_ops()[name]
    if op.samples is None:
        return None
    try:
        arrays, attrs = op.samples(np.random.default_rng(0))[0]
        b = Builder()
        ins = [b.graph.input(a.shape, str(a.dtype) if a.dtype != np.bool_ else "bool") for a in arrays]
        outs = b.graph.call(name, ins, **attrs)
        b.graph.outputs = list(outs) if isinstance(outs, (list, tuple)) else [outs]
        build(b.graph, target=target)
    except FxcError as e:
        return f"{type(e).__name__}: {str(e).splitlines()[0][:160]}"
    return None


def ops_lines(frontend: str, target: str | None = None) -> list:
    """The table `fxc ops` prints."""
    rows = frontend_rows(frontend)
    verdict: dict = {}
    if target is not None:
        needed = sorted({n for _, _, used in rows for n in used})
        progress = Progress(f"fxc ops --target {target}")
        try:
            for i, name in enumerate(needed):
                progress.set("building each op's sample", i, len(needed))
                verdict[name] = op_compiles(name, target)
        finally:
            progress.close()
    width = max((len(r[0]) for r in rows), default=10) + 2
    lines, bad = [], 0
    for name, note, used in rows:
        text = f"{name:<{width}}{note:<11}{' + '.join(used) or '(no kernel of its own)'}"
        if target is not None:
            why = [f"{n}: {verdict[n]}" for n in used if verdict.get(n)]
            bad += bool(why)
            text += f"   {'no: ' + '; '.join(why) if why else 'yes'}"
        lines.append(text)
    head = f"{len(rows)} {frontend} ops fxc converts" + (f"; on {target}: {len(rows) - bad} compile, {bad} do not"
                                                         if target is not None else "")
    return [head] + lines
