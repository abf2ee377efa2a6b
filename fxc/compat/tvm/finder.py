"""The import hook that makes `import tvm` reach the facade, for this process only.

`MODULES` maps every TVM module name a Relay-era script imports to the facade object that stands for it
("module" or "module:attribute" under fxc.compat.tvm). `enable()` appends a meta-path finder *after* Python's own,
so an apache-tvm installed beside fxc is found first and the facade stays out of its way; `enable(replace_real=True)`
puts it in front, for a script that must run on fxc although a real tvm is installed. A `tvm.*` module the table
lacks is an UnsupportedModuleError naming it. `disable()` removes the finder and the facade's `tvm` modules.
"""
from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys

from ...errors import FxcError
from ..numpy_aliases import restore_numpy_aliases
from .unsupported import NOTE, UnsupportedModuleError, missing_attribute

PACKAGE = "fxc.compat.tvm"
MODULES = {
    "tvm": "top",
    "tvm.relay": "relay",
    "tvm.relay.build_module": "relay",          # relay.build_module.build / create_executor are relay's
    "tvm.relay.frontend": "frontend",
    "tvm.relay.nn": "relay:nn",
    "tvm.relay.op": "relay:op",
    "tvm.relay.backend": "relay:backend",
    "tvm.relay.testing": "workloads",
    "tvm.relay.testing.resnet": "workloads:resnet",
    "tvm.relay.testing.mobilenet": "workloads:mobilenet",
    "tvm.relay.testing.vgg": "workloads:vgg",
    "tvm.contrib": "contrib",
    "tvm.contrib.graph_runtime": "graph_executor",      # the name before TVM 0.8
    "tvm.contrib.graph_executor": "graph_executor",
    "tvm.contrib.utils": "contrib:utils",
    "tvm.contrib.util": "contrib:utils",                # the name before TVM 0.7
    "tvm.contrib.download": "contrib:download",
    "tvm.runtime": "runtime",
    "tvm.nd": "ndarray",
    "tvm.ndarray": "ndarray",                           # the name before TVM 0.7
    "tvm.target": "target",
    "tvm.transform": "transform",
    "tvm.te": "contrib:te",
    "tvm.testing": "contrib:testing",
    "tvm.autotvm": "autotvm",
    "tvm.autotvm.task": "autotvm:task",
    "tvm.autotvm.tuner": "autotvm:tuner",
    "tvm.autotvm.callback": "autotvm:callback",
    "tvm.autotvm.measure": "autotvm:measure",
    "tvm.autotvm.graph_tuner": "autotvm:graph_tuner",
}
PARENTS = {name.rsplit(".", 1)[0] for name in MODULES if "." in name}


def resolve(name: str):
    """The facade object that stands for TVM module `name` (imported on first use)."""
    where = MODULES.get(name)
    if where is None:
        raise UnsupportedModuleError(name, f"fxc's facade has no module {name}; it covers "
                                           f"{', '.join(sorted(MODULES))}. {NOTE}")
    module, _, attribute = where.partition(":")
    found = importlib.import_module(f"{PACKAGE}.{module}")
    return getattr(found, attribute) if attribute else found


def module_getattr(name: str, instead: dict | None = None, default: str = NOTE):
    """The `__getattr__` of the facade module standing for TVM module `name`: its submodules in MODULES (imported on
    first use, as `tvm.relay` after `import tvm`), else UnsupportedAPIError naming the attribute."""
    missing = missing_attribute(name, instead, default)

    def __getattr__(attribute: str):
        if f"{name}.{attribute}" in MODULES:
            return resolve(f"{name}.{attribute}")
        return missing(attribute)
    return __getattr__


class _Loader(importlib.abc.Loader):
    def create_module(self, spec):
        return resolve(spec.name)

    def exec_module(self, module):
        """Nothing to run: the facade module is imported already."""


class TvmFinder(importlib.abc.MetaPathFinder):
    """Finds `tvm` and `tvm.*` as the facade's modules (a name the table lacks: UnsupportedModuleError)."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname != "tvm" and not fullname.startswith("tvm."):
            return None
        resolve(fullname)           # an unknown name fails here, with its message
        return importlib.util.spec_from_loader(fullname, _Loader(), is_package=fullname in PARENTS)


_FINDER = TvmFinder()


def enable(replace_real: bool = False) -> None:
    """Let `import tvm` (and its submodules) reach the facade in this process.

    Parameters
    ----------
    replace_real : bool
        False (default): an installed apache-tvm is still imported where there is one (the facade answers only
        when Python finds no `tvm`). True: the facade answers first, even where apache-tvm is installed.

    Raises
    ------
    FxcError
        replace_real=True after this process has imported a real tvm already.

    Also gives numpy back the scalar aliases MXNet 1.9 reads (numpy_aliases.py), so the scripts' own `import mxnet`
    works on numpy 1.26 as fxc's does.
    """
    restore_numpy_aliases()
    real = sys.modules.get("tvm")
    if replace_real and real is not None and not _is_facade(real):
        raise FxcError(f"this process imported apache-tvm already ({getattr(real, '__file__', real)}); enable the "
                       f"facade with replace_real=True before the first `import tvm`")
    if _FINDER in sys.meta_path:
        sys.meta_path.remove(_FINDER)
    if replace_real:
        sys.meta_path.insert(0, _FINDER)
    else:
        sys.meta_path.append(_FINDER)


def disable() -> None:
    """Remove the import hook and forget the facade's `tvm` modules (a real tvm imported meanwhile stays)."""
    if _FINDER in sys.meta_path:
        sys.meta_path.remove(_FINDER)
    for name in [n for n, m in sys.modules.items() if (n == "tvm" or n.startswith("tvm.")) and _is_facade(m)]:
        del sys.modules[name]


def _is_facade(module) -> bool:
    return isinstance(getattr(module, "__spec__", None), importlib.machinery.ModuleSpec) and \
        isinstance(module.__spec__.loader, _Loader)
