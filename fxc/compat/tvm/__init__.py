"""A TVM-Relay-era facade over fxc: scripts written for `relay.frontend.from_mxnet` → `relay.build` → the graph
runtime run on fxc, with one line added at their top or unchanged through a runner.

    import fxc.compat.tvm.install           # first line of the script: `import tvm` now reaches the facade
    python -m fxc.compat.tvm script.py ...  # or run an unchanged script (--replace-real-tvm: even beside apache-tvm)

The facade's modules stand for TVM's (`fxc.compat.tvm.finder.MODULES`): frontends (`frontend.py`: MXNet symbols and
Gluon blocks, ONNX, TorchScript → `(mod, params)`), a small Relay IR over fxc's graph (`ir.py`), `relay.build` and
`PassContext` (`build.py`, `transform.py`), targets and devices (`target.py`, `ndarray.py`), the graph executor
(`graph_executor.py`), export and load onto fxc's artifact (`runtime.py`), `relay.testing` workloads with random
weights (`workloads.py`) and AutoTVM over fxc's tuner (`autotvm.py`). A TVM API it does not provide raises
`UnsupportedAPIError` naming it and what to use instead; docs/coming-from-tvm.md maps every call to fxc's own.
Importing this package changes nothing: `enable()` (or the `install` module) adds the import hook.
"""
from .finder import disable, enable  # noqa: F401
