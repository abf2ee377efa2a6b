"""Adapters that keep other stacks' entry points working on fxc, under fxc's own name (a top-level `compat` would
collide with other packages in a user's environment).

    from fxc.compat.numpy_aliases import import_mxnet
    mx = import_mxnet()            # MXNet 1.9.1 on numpy 1.26: the aliases numpy 1.24 removed restored first

    import fxc.compat.tvm.install  # a TVM-Relay-era script's `import tvm` now reaches fxc (docs/coming-from-tvm.md)
    python -m fxc.compat.tvm script.py     # the same for a script left unchanged

This package imports nothing at import time: fxc's frontends import `numpy_aliases` from here.
"""
