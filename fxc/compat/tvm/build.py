"""`relay.build` and `relay.create_executor`: a Relay function of the facade built by fxc's driver.

`build(mod, target, params=)` converts the function to fxc's graph with the params bound (ir.py), builds it with
`fxc.driver.build.build` for the fxc target the TVM target means (target.py), with the options the active
PassContext means (transform.py) and the tuning log of an active `autotvm.apply_history_best` (`TUNING_LOGS`), and
returns a `GraphFactory`: TVM's factory module (`lib["default"](dev)`, `export_library`, `get_graph_json`) that
also unpacks as the old `graph, lib, params` tuple. The params are compiled into the module, so the `params` it
hands back is empty; setting a compiled param again (`set_input(**params)`) must give the value it was built with.
"""
from __future__ import annotations

import numpy as np

from ...errors import InputError
from .graph_executor import GraphFactory, GraphModule, executor_on
from .ir import main_function, to_graph
from .ndarray import as_numpy, cpu
from .target import Target, check_host
from .transform import PassContext
from .unsupported import UnsupportedAPIError, missing_member

TUNING_LOGS: list = []          # the logs of the active autotvm.apply_history_best contexts (innermost last)


def build(ir_mod, target=None, target_host=None, params=None, mod_name: str = "default", executor=None,
          runtime=None, **rest) -> GraphFactory:
    """`relay.build(mod, target, params=params)`: see the module doc."""
    return _build(ir_mod, target, target_host, params, mod_name, executor, runtime, rest, PassContext.current())


def _build(ir_mod, target, target_host, params, mod_name, executor, runtime, rest, context) -> GraphFactory:
    from ...driver.build import build as fxc_build  # deferred: `import tvm` loads no compiler
    if rest:
        raise UnsupportedAPIError(f"relay.build({', '.join(rest)}=...)", "relay.build takes mod, target, "
                                  "target_host, params and mod_name")
    for name, given in (("executor", executor), ("runtime", runtime)):
        if given is not None and str(getattr(given, "name", given)) not in ("graph", "cpp"):
            raise UnsupportedAPIError(f"relay.build({name}={given!r})", "fxc builds for its graph executor")
    if target is None:
        raise UnsupportedAPIError("relay.build without a target", "pass target='llvm' (or 'cuda', 'opencl', ...)")
    if isinstance(target, dict):
        raise UnsupportedAPIError("relay.build with a dict of targets (heterogeneous execution)", "fxc builds a "
                                  "whole model for one target; build one per target")
    target = Target(target, host=getattr(target, "host", None))
    check_host(target_host)
    func = main_function(ir_mod)
    graph, bound = to_graph(func, {k: as_numpy(v) for k, v in (params or {}).items()})
    options = context.fxc_options()
    if TUNING_LOGS:
        options["tuning_log"] = TUNING_LOGS[-1]
    module = fxc_build(graph, target=target.fxc, **options)
    return GraphFactory(module, mod_name, bound)


class Executor:
    """`relay.create_executor(kind, mod, device, target, params)`; `.evaluate()` is the model as a function."""

    def __init__(self, kind, mod, device, target, params):
        if kind not in ("debug", "graph", "vm", "aot"):
            raise UnsupportedAPIError(f"create_executor({kind!r})", "kinds: 'graph', 'debug', 'vm', 'aot' (all run "
                                      "fxc's graph executor)")
        self.mod, self.device, self.target, self.params = mod, device or cpu(0), target, dict(params or {})

    def evaluate(self, expr=None):
        """A function of the model's inputs (positionally or by name; params by name too) returning NDArrays (a
        tuple for several outputs). It builds now, in the active PassContext, and again when a call gives
        params."""
        func = main_function(expr if expr is not None else self.mod)
        names = [v.name_hint for v in func.params]
        context = PassContext.current()
        built: list = []

        def factory(params: dict) -> GraphFactory:
            """The build for these params: the last one when it baked the same values."""
            if not (built and all(k in built[0].baked and np.array_equal(as_numpy(v), built[0].baked[k])
                                  for k, v in params.items())):
                built[:] = [_build(func, self.target, None, params, "default", None, None, {}, context)]
            return built[0]

        factory(self.params)

        def run(*args, **kwargs):
            if len(args) > len(names):
                raise InputError(f"the function takes {len(names)} input(s) {names}, got {len(args)}")
            inputs = dict(zip(names, args))
            params = dict(self.params)
            for k, v in kwargs.items():
                (inputs if k in names else params)[k] = v
            module = GraphModule(executor_on(factory(params), (self.device,), "create_executor"))
            module.run(**inputs)
            outs = [module.get_output(i) for i in range(module.get_num_outputs())]
            return outs[0] if len(outs) == 1 else tuple(outs)
        return run

    __getattr__ = missing_member("relay.create_executor(...)")


def create_executor(kind: str = "debug", mod=None, device=None, target="llvm", params=None) -> Executor:
    return Executor(kind, mod, device, target, params)

