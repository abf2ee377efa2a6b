"""The runtime module class of every target kind, in one table: what a build of that kind makes (each backend's entry,
fxc/backends/<kind>/backend.py) and what loads its artifacts (fxc/runtime/artifact/). Named "package.module:Class"
and imported when first asked: each device's library (pyopencl, moderngl, playwright) is optional."""
from __future__ import annotations

import importlib

MODULES = {
    "llvm": "fxc.runtime.cpu.module:Module",
    "wasm": "fxc.runtime.browser.wasm:WasmModule",
    "opencl": "fxc.runtime.opencl.module:OpenCLModule",
    "opengl": "fxc.runtime.opengl.module:GLModule",
    "webgl": "fxc.runtime.browser.webgl:WebGLModule",
    "webgpu": "fxc.runtime.browser.webgpu:WebGPUModule",
}


def by_name(path: str):
    """The object at "package.module:name", its module imported now."""
    module, _, name = path.partition(":")
    return getattr(importlib.import_module(module), name)


def module_class(kind: str) -> type:
    """The runtime module class of a target kind (MODULES), imported now."""
    return by_name(MODULES[kind])
