"""Gluon: `fxc.mxnet.compile(block, x)` compiles a HybridBlock with fxc and returns a HybridBlock running it.

Takes an initialised Gluon HybridBlock and example input(s); traces the block to a symbol on `mx.sym.var`
inputs, takes its current parameter values (baked in: compile again after changing them) and compiles through
`fxc.capture.mxnet.convert.from_mxnet`. Produces an `FxcBlock`, a HybridBlock whose forward runs the compiled model on
NDArrays, so it drops into existing Gluon code (`net.features = fxc.mxnet.compile(net.features, x)`).
"""
from __future__ import annotations

import functools

import numpy as np

from ...errors import UnsupportedOpError
from .convert import from_mxnet, import_mxnet


@functools.cache
def _block_class():
    mx = import_mxnet()

    class FxcBlock(mx.gluon.HybridBlock):
        """A Gluon block running an fxc-compiled model: `block(x)` takes and returns NDArrays.

        `.compiled` is the `MXNetModel` (what `fxc.export` writes)."""

        def __init__(self, compiled, name: str):
            super().__init__(prefix=f"fxc_{name}_")
            self.compiled = compiled

        def forward(self, *args):
            if any(isinstance(a, mx.sym.Symbol) for a in args):
                raise UnsupportedOpError("a block compiled by fxc runs on NDArrays; it cannot be traced into a "
                                         "symbol: hybridize the blocks around it, not their parent")
            return self.compiled(*args)

        def hybridize(self, active=True, **kwargs):     # already compiled: nothing to hybridize
            return None

        def __repr__(self):
            return f"FxcBlock({self.compiled!r})"

    return FxcBlock


def compile(block, x, target: str = "llvm", **options):
    """Compile a Gluon HybridBlock with fxc for inputs shaped like `x`.

    Parameters
    ----------
    block : mx.gluon.HybridBlock
        Initialised (parameters with data, e.g. after one forward or `initialize()` with known shapes).
    x : mx.nd.NDArray or numpy.ndarray, or a tuple of them
        Example input(s): fix the compiled shapes and dtypes.
    target, **options
        As for `fxc.from_mxnet`.

    Returns
    -------
    FxcBlock
        A HybridBlock whose forward runs the compiled model; `.compiled` is the MXNetModel.
    """
    mx = import_mxnet()
    if not isinstance(block, mx.gluon.HybridBlock):
        raise UnsupportedOpError(f"fxc.mxnet.compile takes a Gluon HybridBlock, got {type(block).__name__}; a plain "
                                 f"Block runs Python code that has no symbol to compile")
    xs = tuple(x) if isinstance(x, (tuple, list)) else (x,)
    xs = tuple(a if isinstance(a, mx.nd.NDArray) else mx.nd.array(a, dtype=a.dtype) for a in xs)
    names = ["data"] if len(xs) == 1 else [f"data{i}" for i in range(len(xs))]
    block(*xs)                     # finishes deferred initialisation
    sym = block(*[mx.sym.var(n) for n in names])
    if isinstance(sym, (list, tuple)):
        sym = mx.sym.Group(list(sym))
    params = {p.name: p.data() for p in block.collect_params().values()}
    compiled = from_mxnet(sym, params, shapes={n: a.shape for n, a in zip(names, xs)},
                          dtype={n: np.dtype(a.dtype).name for n, a in zip(names, xs)}, target=target, **options)
    return _block_class()(compiled, block.name)
