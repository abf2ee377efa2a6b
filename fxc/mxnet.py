"""fxc for MXNet users; importing it registers fxc's partitioner with MXNet (built once with g++, cached).

    import fxc.mxnet
    m = fxc.mxnet.from_mxnet(sym, params, shapes={"data": (1, 3, 224, 224)})   # the whole model, by fxc
    block = fxc.mxnet.compile(net, x)                      # a Gluon HybridBlock running the compiled net
    sym2 = sym.optimize_for("fxc", args, aux)              # fxc runs what it supports, MXNet the rest
    net.optimize_for(x, backend="fxc")

The code lives in fxc/capture/mxnet*.py; this module only re-exports it.
"""
import warnings

from .capture.mxnet.convert import MXNetModel, from_mxnet
from .capture.mxnet.extension import library_path, register
from .capture.mxnet.gluon import compile
from .errors import FxcError

try:
    register()
except (FxcError, OSError, RuntimeError) as _e:     # (MXNetError is a RuntimeError) from_mxnet and compile still
    # work; only optimize_for(backend="fxc") lacks fxc, and MXNet says so when it is asked for it
    warnings.warn(f"fxc's MXNet partitioner is not registered: {_e}", stacklevel=2)

__all__ = ["MXNetModel", "compile", "from_mxnet", "library_path", "register"]
