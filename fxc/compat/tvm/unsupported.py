"""The facade's one error for a TVM API it does not provide, and the namespaces that raise it.

`UnsupportedAPIError(api, instead)` names the TVM call and what to use instead; `missing_attribute(module, instead)`
makes a module's `__getattr__` that raises it for every public name the module lacks (private and dunder names stay
plain AttributeErrors, so Python's own probes keep working), `missing_member(cls)` a class's; `Namespace` is a module
object of a few functions (`relay.nn`, `autotvm.tuner`, ...) with the same behaviour.
"""
from __future__ import annotations

import types

from ...errors import FxcError

NOTE = "fxc's TVM facade (fxc.compat.tvm) runs Relay-era scripts on fxc; see docs/coming-from-tvm.md"


class UnsupportedAPIError(FxcError):
    """A TVM API that fxc's facade does not provide: the message names it and what to use instead."""

    def __init__(self, api: str, instead: str):
        super().__init__(f"{api} is not supported by fxc's TVM facade: {instead}")
        self.api = api


class UnsupportedModuleError(UnsupportedAPIError, ModuleNotFoundError):
    """`import tvm.<name>` of a TVM module the facade does not provide (also a ModuleNotFoundError, as Python's
    import statement expects)."""


def missing_attribute(module: str, instead: dict | None = None, default: str = NOTE):
    """A module-level `__getattr__` for the facade module `module` (its TVM name): UnsupportedAPIError naming
    `module.name` and what to use instead (`instead[name]`, else `default`)."""
    instead = instead or {}

    def __getattr__(name: str):
        if name.startswith("_"):
            raise AttributeError(name)
        raise UnsupportedAPIError(f"{module}.{name}", instead.get(name, default))
    return __getattr__


def missing_member(cls: str, default: str = NOTE):
    """A class's `__getattr__` (called only for names the object lacks): UnsupportedAPIError naming `cls.name`."""

    def __getattr__(self, name: str):
        if name.startswith("_"):
            raise AttributeError(name)
        raise UnsupportedAPIError(f"{cls}.{name}", default)
    return __getattr__


class Namespace(types.ModuleType):
    """A TVM module that holds a few functions (`tvm.relay.nn`, `tvm.autotvm.tuner`): attributes are the members
    given; any other public name is an UnsupportedAPIError."""

    def __init__(self, name: str, doc: str, instead: dict | None = None, default: str = NOTE, **members):
        super().__init__(name, doc)
        self.__dict__.update(members)
        self._instead, self._default = instead or {}, default

    def __getattr__(self, name: str):
        if name.startswith("_"):
            raise AttributeError(name)
        raise UnsupportedAPIError(f"{self.__name__}.{name}", self._instead.get(name, self._default))
