"""Adapters that keep other stacks' entry points working next to fxc (see DESIGN.md, `compat/`).

    from compat.numpy_aliases import import_mxnet
    mx = import_mxnet()            # MXNet 1.9.1 on numpy 1.26: the aliases numpy 1.24 removed restored first
"""
