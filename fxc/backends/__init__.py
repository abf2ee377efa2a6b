"""The backends, one per target kind, and the one way to reach them: `BACKENDS[kind]` (a `Backend`).

    target = fill("opencl")             # parsed (a Target passes as it is) and filled once: its device opened
    backend = backend_of(target)        # BACKENDS[target.kind]; a TargetError for a kind nothing builds
    check_runnable(target)              # TargetError when this host cannot run code built for it

Adding a target is one backend (renderer + its entry: a `Backend`), one device API under fxc/runtime (its caps
and `open_target`) and one line below.
"""
from __future__ import annotations

from ..errors import TargetError
from ..target import Target
from .backend import Backend
from .external import libraries_of
from .llvm import backend as llvm_backend
from .opencl import backend as opencl_backend
from .opengl import backend as opengl_backend
from .wasm import backend as wasm_backend
from .webgl import backend as webgl_backend
from .webgpu import backend as webgpu_backend

BACKENDS: dict[str, Backend] = {
    "llvm": llvm_backend.BACKEND,
    "wasm": wasm_backend.BACKEND,
    "opencl": opencl_backend.BACKEND,
    "opengl": opengl_backend.BACKEND,
    "webgl": webgl_backend.BACKEND,
    "webgpu": webgpu_backend.BACKEND,
}


__all__ = ["BACKENDS", "Backend", "backend_of", "check_runnable", "fill", "libraries_of"]


def backend_of(target: Target) -> Backend:
    """The backend of the target's kind (a TargetError for a kind fxc parses but has no backend for here)."""
    backend = BACKENDS.get(target.kind)
    if backend is None:
        raise TargetError(f"target {target}: only {', '.join(repr(k) for k in BACKENDS)} can be built here")
    return backend


def fill(target: "str | Target | None") -> Target:
    """The target parsed (a Target is taken as it is) and filled by its backend's device API: the device it names
    opened and its Caps (a TargetError says what is missing); an already filled target unchanged."""
    target = Target.parse(target)
    if target.device is not None:
        return target
    backend = backend_of(target)
    target.check_options()
    return backend.fill(target)


def check_runnable(target: "str | Target | None") -> None:
    """TargetError when this host cannot run code built for the target (a CPU whose features the host lacks; wasm
    without its linker or browser). Compiling and exporting for such a target is allowed; running is not."""
    target = Target.parse(target)
    backend_of(target).check_runnable(target)
