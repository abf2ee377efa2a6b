"""The facade's Relay IR: what `(mod, params)` hold, and how a Relay function becomes fxc's graph.

A frontend (or a `relay.testing` workload) returns an `IRModule` whose "main" `Function` takes a `Var` per model
input and whose body is an `Imported` expression: the model, kept as a `Source` that converts it to fxc's graph
(fxc/relay_like/graph.py) with given param values. Scripts may wrap the body in Relay ops (`relay.nn.softmax(
func.body)`, `OPS`) and make a new `relay.Function` of it; `to_graph(func, params)` converts the model with the
params bound (the frontend's where `params` leaves one out), appends the ops and orders the inputs as the
function's params. A function of `relay.var`s and ops alone (no imported model) converts too.
"""
from __future__ import annotations

import numpy as np

from ...errors import InputError, ShapeError
from ...relay_like.builder import Builder, stated_promotion
from ...relay_like.graph import Graph
from .ndarray import as_numpy
from .unsupported import UnsupportedAPIError, missing_member

# Relay op -> (fxc op, {Relay attribute: (fxc attribute, default)}) for the ops scripts put around an imported model
OPS = {
    "nn.softmax": ("softmax", {"axis": ("dim", -1)}),
    "nn.log_softmax": ("log_softmax", {"axis": ("dim", -1)}),
    "nn.relu": ("relu", {}), "sigmoid": ("sigmoid", {}), "tanh": ("tanh", {}), "exp": ("exp", {}),
    "add": ("add", {}), "subtract": ("sub", {}), "multiply": ("mul", {}), "divide": ("div", {}),
}


class Source:
    """One imported model: `inputs` [(name, shape, dtype)], `params` {name: numpy array} (the frontend's values)
    and `convert(params) -> Graph` (its graph inputs named and ordered as `inputs`). Subclasses: frontend.py."""

    kind = "model"

    def __init__(self, inputs: list, params: dict):
        self.inputs, self.params = inputs, params
        self.vars = [Var(name, shape, dtype) for name, shape, dtype in inputs]

    def module(self) -> "IRModule":
        """The IRModule a frontend returns: main(vars) = the model's outputs."""
        return IRModule({"main": Function(self.vars, Imported(self, self.vars))})

    def convert(self, params: dict) -> Graph:
        raise NotImplementedError

    def bind(self, given: dict | None) -> dict:
        """The param values a build uses: `given` (names checked, shapes and dtypes as the model's) over the
        frontend's own."""
        values = dict(self.params)
        for name, value in (given or {}).items():
            if name not in self.params:
                inputs = [n for n, _, _ in self.inputs]
                raise InputError(f"params name {name!r}, which is not a param of this {self.kind} model (its params: "
                                 f"{', '.join(sorted(self.params)[:8])}{'...' if len(self.params) > 8 else ''}; its "
                                 f"inputs: {', '.join(inputs)}, which take their values at run time)")
            array = as_numpy(value)
            want = self.params[name]
            if array.shape != want.shape or array.dtype != want.dtype:
                raise ShapeError(f"param {name!r}: {array.dtype}{list(array.shape)} where the model has "
                                 f"{want.dtype}{list(want.shape)}")
            values[name] = np.array(array)         # (the build's own copy: later changes by the script do not reach it)
        return values

    def changed(self, params: dict) -> dict:
        """The params whose values differ from the frontend's."""
        return {n: v for n, v in params.items() if v is not self.params[n] and not np.array_equal(v, self.params[n])}


class Expr:
    """A Relay expression of the facade (`args`: the expressions it reads)."""

    args: tuple = ()

    def astext(self, show_meta_data: bool = True) -> str:
        return str(to_graph(Function(free_vars(self), self), None)[0])

    def __str__(self):
        return self.astext()

    __getattr__ = missing_member("tvm.relay.Expr", default="the facade's expressions are frontends' models, "
                                 "relay.var and the ops of relay.nn; print them with astext()")


class Var(Expr):
    """`relay.var(name, shape=, dtype=)`: an input of a function."""

    def __init__(self, name_hint: str, shape=None, dtype: str = "float32"):
        if shape is None:
            raise UnsupportedAPIError(f"relay.var({name_hint!r}) without a shape", "give shape= (fxc builds for "
                                      "concrete shapes)")
        self.name_hint, self.shape, self.dtype = name_hint, tuple(int(s) for s in shape), str(dtype)

    def __repr__(self):
        return f"%{self.name_hint}: Tensor[{self.shape}, {self.dtype}]"


class Imported(Expr):
    """The outputs of an imported model applied to the function's input Vars (`index`: one of several outputs)."""

    def __init__(self, source: Source, args: list, index: int | None = None):
        self.source, self.args, self.index = source, list(args), index

    def __repr__(self):
        return f"{self.source.kind}_model({', '.join(v.name_hint for v in self.args)})"


class Call(Expr):
    """A Relay op (`OPS`) applied to expressions."""

    def __init__(self, op: str, args: list, attrs: dict):
        if op not in OPS:
            raise UnsupportedAPIError(f"relay op {op}", f"the facade applies {', '.join(OPS)} to a model's outputs; "
                                      f"for other ops, add them to the model in its framework before importing it")
        for a in args:
            if not isinstance(a, Expr):
                raise UnsupportedAPIError(f"relay op {op} on a {type(a).__name__}", "pass expressions (a model's "
                                          "body, relay.var) as its operands")
        unknown = set(attrs) - set(OPS[op][1])
        if unknown:
            raise UnsupportedAPIError(f"relay op {op} with {sorted(unknown)}", f"it takes {list(OPS[op][1])}")
        self.op, self.args, self.attrs = op, list(args), attrs

    def __repr__(self):
        return f"{self.op}({', '.join(map(repr, self.args))})"


class Function(Expr):
    """`relay.Function(params, body, ret_type, type_params, attrs)`; `mod["main"]` of a frontend's module."""

    def __init__(self, params, body, ret_type=None, type_params=None, attrs=None):
        if not isinstance(body, Expr) or isinstance(body, Function):
            raise UnsupportedAPIError(f"relay.Function with a body of type {type(body).__name__}", "the body is an "
                                      "expression over the params: a model's func.body, or ops around it")
        self.params, self.body = list(params), body
        self.ret_type, self.type_params, self.attrs = ret_type, list(type_params or ()), attrs

    def astext(self, show_meta_data: bool = True) -> str:
        return str(to_graph(self, None)[0])


class IRModule:
    """`tvm.IRModule`: a "main" Function (what relay.build compiles)."""

    def __init__(self, functions=None, type_definitions=None):
        if type_definitions:
            raise UnsupportedAPIError("IRModule(type_definitions=...)", "the facade's modules hold functions only")
        self.functions = {}
        for name, func in (functions or {}).items():
            self[name] = func

    @staticmethod
    def from_expr(expr, functions=None, type_defs=None) -> "IRModule":
        func = expr if isinstance(expr, Function) else Function(free_vars(expr), expr)
        return IRModule({**(functions or {}), "main": func})

    def __getitem__(self, name):
        name = getattr(name, "name_hint", name)
        if name not in self.functions:
            raise UnsupportedAPIError(f"IRModule[{name!r}]", f"the module holds {sorted(self.functions)}")
        return self.functions[name]

    def __setitem__(self, name, func):
        if not isinstance(func, Function):
            raise UnsupportedAPIError(f"IRModule[{name!r}] = {type(func).__name__}", "assign a relay.Function")
        self.functions[getattr(name, "name_hint", name)] = func

    def astext(self, show_meta_data: bool = True) -> str:
        return "\n".join(f"def @{name}:\n{f.astext()}" for name, f in self.functions.items())

    def __str__(self):
        return self.astext()

    __getattr__ = missing_member("tvm.IRModule", default="the facade's IRModule holds functions: mod['main'], "
                                 "IRModule.from_expr, astext()")


def main_function(mod) -> Function:
    """The function relay.build compiles: mod["main"], or mod itself when it is a Function."""
    if isinstance(mod, IRModule):
        return mod["main"]
    if isinstance(mod, Function):
        return mod
    raise UnsupportedAPIError(f"relay.build of a {type(mod).__name__}", "build an IRModule or a relay.Function "
                              "that a relay.frontend or relay.testing returned")


def free_vars(expr: Expr) -> list:
    """The Vars an expression reads, in the order first met."""
    found: list = []

    def walk(e):
        if isinstance(e, Var):
            if all(v is not e for v in found):
                found.append(e)
        for a in getattr(e, "args", ()):
            walk(a)
    walk(expr)
    return found


def sources(expr: Expr) -> list:
    found: list = []

    def walk(e):
        if isinstance(e, Imported) and all(s is not e.source for s in found):
            found.append(e.source)
        for a in getattr(e, "args", ()):
            walk(a)
    walk(expr)
    return found


def to_graph(func: Function, params: dict | None) -> tuple:
    """(fxc Graph of `func`, the param values bound) — see the module doc."""
    models = sources(func.body)
    if len(models) > 1:
        raise UnsupportedAPIError("a Relay function over several imported models", "build each model on its own")
    bound = models[0].bind(params) if models else {}
    if not models and params:
        raise InputError(f"params name {sorted(params)}, but the function imports no model; its inputs "
                         f"{[v.name_hint for v in func.params]} take their values at run time")
    graph = models[0].convert(bound) if models else Graph()
    b = Builder(graph, promotion=stated_promotion)
    values: dict = {}           # id(expr) -> Value or list of Values
    if models:
        by_name = {v.name: v for v in graph.inputs}
        for var in models[0].vars:
            values[id(var)] = by_name[var.name_hint]

    def value(e):
        if id(e) in values:
            return values[id(e)]
        if isinstance(e, Var):
            if e not in func.params:
                raise UnsupportedAPIError(f"relay.Function whose body reads {e.name_hint!r}", "list every Var the "
                                          "body reads among the function's params")
            v = graph.input(e.shape, e.dtype, e.name_hint)
        elif isinstance(e, Imported):
            outs = list(graph.outputs)
            v = outs if e.index is None else outs[e.index]
            v = v[0] if isinstance(v, list) and len(v) == 1 else v
        else:
            args = [value(a) for a in e.args]
            if any(isinstance(a, list) for a in args):
                raise UnsupportedAPIError(f"relay op {e.op} on a model of several outputs", "pick one with "
                                          "relay.TupleGetItem(body, index)")
            op, table = OPS[e.op]
            attrs = {name: e.attrs.get(relay, default) for relay, (name, default) in table.items()}
            if "dim" in attrs:
                attrs["dim"] = int(attrs["dim"]) % len(args[0].shape)
            v = b.call(op, args, **attrs)
        values[id(e)] = v
        return v

    out = value(func.body)
    graph.outputs = out if isinstance(out, list) else [out]
    order = []
    for var in func.params:
        v = values.get(id(var))
        if v is None:           # a param the body does not read: still an input of the module, as in TVM
            v = values[id(var)] = graph.input(var.shape, var.dtype, var.name_hint)
        order.append(v)
    extra = [v.name for v in graph.inputs if all(v is not o for o in order)]
    if extra:
        raise UnsupportedAPIError(f"relay.Function that drops the model's input(s) {extra}", "keep every input of "
                                  "the model among the function's params (func.params)")
    graph.inputs = order
    return graph, bound


def tuple_get_item(expr, index: int) -> Imported:
    """`relay.TupleGetItem(func.body, i)`: output `i` of an imported model of several outputs."""
    if not isinstance(expr, Imported) or expr.index is not None:
        raise UnsupportedAPIError("relay.TupleGetItem of this expression", "it picks one output of a model's body")
    return Imported(expr.source, expr.args, int(index))
