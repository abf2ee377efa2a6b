"""`tvm.relay` (and `tvm.relay.build_module`): build, build_config, create_executor, the IR a script touches
(Function, var, IRModule, TupleGetItem), the few ops scripts put around an imported model (`relay.nn.softmax`,
ir.OPS), `relay.op.get` (for autotvm's op filters), and the param-dict helpers; `relay.frontend` and
`relay.testing` are modules of their own (frontend.py, workloads.py)."""
from __future__ import annotations

import sys

from .build import build, create_executor  # noqa: F401  (relay's names)
from .finder import module_getattr
from .ir import OPS, Call, Function, IRModule, Var, tuple_get_item  # noqa: F401  (relay's names)
from .ndarray import load_param_dict, save_param_dict  # noqa: F401  (relay's names before TVM 0.8)
from .transform import build_config  # noqa: F401  (relay's name)
from .unsupported import Namespace, UnsupportedAPIError


def var(name_hint: str, type_annotation=None, shape=None, dtype: str = "float32") -> Var:
    """`relay.var("data", shape=(1, 3, 224, 224), dtype="float32")`."""
    if type_annotation is not None:
        raise UnsupportedAPIError("relay.var(type_annotation=...)", "give shape= and dtype=")
    return Var(name_hint, shape, dtype)


def _op(name: str):
    def apply(*args, **attrs):
        return Call(name, list(args), attrs)
    apply.__name__ = name.rsplit(".", 1)[-1]
    apply.__doc__ = f"relay.{name}: fxc's {OPS[name][0]} on the outputs of an imported model."
    return apply


class OpRef:
    """`relay.op.get("nn.conv2d")`: an op's name, which autotvm's `ops=` filter reads."""

    def __init__(self, name: str):
        self.name = name

    def __repr__(self):
        return f"Op({self.name})"

    def __eq__(self, other):
        return isinstance(other, OpRef) and other.name == self.name

    def __hash__(self):
        return hash(self.name)


class Executor:
    """`relay.backend.Executor("graph")` (TVM 0.9 and later): fxc's graph executor is the only one."""

    def __init__(self, name: str = "graph", options=None):
        if name != "graph" or options:
            raise UnsupportedAPIError(f"Executor({name!r}{', options' if options else ''})", "fxc builds for its "
                                      "graph executor: Executor('graph')")
        self.name = name


class Runtime:
    """`relay.backend.Runtime("cpp")`: fxc's runtime (Python and its C entry point in the artifact)."""

    def __init__(self, name: str = "cpp", options=None):
        if name != "cpp" or options:
            raise UnsupportedAPIError(f"Runtime({name!r}{', options' if options else ''})", "fxc's runtime is its "
                                      "own (the artifact's C entry point covers deployment): Runtime('cpp')")
        self.name = name


nn = Namespace("tvm.relay.nn", "Neural-network ops on the facade's expressions.",
               default=f"the facade applies {', '.join(OPS)} to an imported model's outputs; add other ops to the "
                       f"model in its framework",
               **{n.split(".")[1]: _op(n) for n in OPS if n.startswith("nn.")})
op = Namespace("tvm.relay.op", "Op references.", get=OpRef, nn=nn)
backend = Namespace("tvm.relay.backend", "Executor and Runtime.", Executor=Executor, Runtime=Runtime)
TupleGetItem = tuple_get_item
Module = IRModule               # relay.Module, the name before TVM 0.7
build_module = sys.modules[__name__]
globals().update({n: _op(n) for n in OPS if "." not in n})
__getattr__ = module_getattr("tvm.relay", {"transform": "fxc runs its own pass pipeline; PassContext(opt_level=, "
                                           "disabled_pass=) chooses among its passes"},
                             default="the facade's relay has build, build_config, create_executor, frontend, "
                                     "testing, Function, var, IRModule, TupleGetItem and the ops of ir.OPS")
