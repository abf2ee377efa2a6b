"""`tvm.runtime`: `load_module(path)` reads what `lib.export_library(path)` wrote (fxc's deploy artifact, checked
by `fxc.load`) as a lib whose `["default"](dev)` is a graph executor; `save_param_dict` / `load_param_dict`."""
from __future__ import annotations

from . import ndarray  # noqa: F401  (tvm.runtime.ndarray)
from .finder import module_getattr
from .graph_executor import GraphFactory
from .ndarray import Device, NDArray, load_param_dict, save_param_dict  # noqa: F401  (tvm.runtime's names)
from .unsupported import UnsupportedAPIError


def load_module(path, fmt: str = "") -> GraphFactory:
    """The lib `export_library` wrote at `path` (an fxc artifact, whatever its suffix)."""
    if fmt:
        raise UnsupportedAPIError(f"load_module(fmt={fmt!r})", "fxc's artifact is one format; pass the path only")
    from ...runtime.artifact.loader import load  # deferred: `import tvm` loads no runtime library
    return GraphFactory(load(path))


__getattr__ = module_getattr("tvm.runtime", default="the facade's tvm.runtime has load_module, "
                                "save_param_dict, load_param_dict, Device and NDArray")
