"""The Backend protocol: what the driver asks of one target kind (fxc.backends.BACKENDS holds one per kind).

A backend is of one of two families, which decide how the driver lowers the fused groups (fxc/driver/build.py):

- "cpu" (llvm, wasm): the CPU passes and schedules; every kernel goes into one LLVM module, written and compiled
  by `compiler` (module_writer, add_kernel, finish_module, CompileQueue: fxc.backends.llvm.compile), which `link`
  makes one loadable unit (a shared library, a .wasm module);
- "gpu" (opencl, opengl, webgl, webgpu): the GPU schedules; kernels launched one by one, `render`ed as one program.

and its module has one of two forms: "library" (a shared library this process loads and calls on the inputs in
place: fxc.runtime.cpu.module) or "program" (a program that its device, or a browser page, loads and runs as a plan of
launches, the weights uploaded once and kept resident there: fxc.runtime.device_module and the device APIs).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from ..runtime.modules import by_name, module_class

FAMILIES = ("cpu", "gpu")
FORMS = ("library", "program")


def _runs_anywhere(target) -> None:
    """Code for the target runs wherever its device opens (the device's own errors say what is missing)."""


def _nothing() -> None:
    """Nothing to start."""


def _no_fp64(kernel) -> bool:
    return False


def _not_measured() -> float:
    return 0.0


@dataclass(frozen=True)
class Backend:
    """One target kind: how it lowers, renders and links, the runtime module it builds, and its device."""
    kind: str
    family: str                     # "cpu" or "gpu" (above)
    form: str                       # its module's form: "library" or "program" (above)
    symbolic_module: str = ""       # the runtime module class ("package.module:Class") for a graph with size
    #                                 symbols, where it is not its kind's (fxc.runtime.modules.MODULES)
    device_api: str = ""            # the device API whose `open_target(target)` fills the target: opens the device
    #                                 and reads its Caps ("": a target whose Caps parsing gave: llvm, wasm)
    check_runnable: Callable = _runs_anywhere   # Target -> None, or TargetError when this host cannot run its code
    start: Callable = _nothing      # starts what its compiles need, ahead of them (the LLVM compile workers)
    cached_modules: bool = False    # built modules are kept in the on-disk module cache (fxc/driver/cache.py)
    bf16_gain: Callable = _not_measured     # () -> vdpbf16ps multiply-adds per FMA's on this host (0: not measured)
    # gpu family
    render: Callable | None = None  # (kernels, rows, caps) -> the program's source; rows: (names of the row-launch
    #                                 kernels, elements of the largest tensor at the symbol's largest size) or None
    needs_fp64: Callable = _no_fp64     # kernel -> whether it computes in float64
    # cpu family
    compiler: object = None         # the LLVM module writer and compile queue (fxc.backends.llvm.compile)
    link: Callable | None = None    # (LLVM IR, compile queue, target) -> (the linked unit, its objects)
    program: Callable | None = None     # program form: (linked unit, has a prepack step, target) -> program text
    entries: Callable | None = None     # ([(entry name, kernel, plan args)], target) -> a module with one entry
    #                                     per kernel (the kernels another target runs in its page: PageKernels)

    def module_class(self, symbolic: bool) -> type:
        """The runtime module class of a build (symbolic: the graph has size symbols)."""
        return by_name(self.symbolic_module) if symbolic and self.symbolic_module else module_class(self.kind)

    def fill(self, target):
        """The target filled by its device API: the opened device and the Caps it reports."""
        return by_name(f"{self.device_api}:open_target")(target) if self.device_api else target
