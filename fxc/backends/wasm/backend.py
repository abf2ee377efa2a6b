"""The wasm backend entry (fxc.backends.BACKENDS["wasm"]): the browser's CPU, LLVM's wasm32 code as one .wasm module
whose plan runs in a page (the device API: fxc.runtime.browser.wasm)."""
from __future__ import annotations

from ...runtime.modules import by_name
from ..backend import Backend
from ..llvm import compile as llvm
from .link import MEMORY_PAGES, build_entries, build_wasm, find_linker

DEVICE_API = "fxc.runtime.browser.wasm"


def check_runnable(target) -> None:
    """TargetError without the linker that makes the module or the browser that runs it."""
    find_linker()
    by_name(f"{DEVICE_API}:open_wasm_runtime")()


def program(wasm: bytes, prepack: bool, target) -> str:
    """The module's program part: the .wasm, its prepack step, its threads and (threaded) its memory's pages."""
    return by_name(f"{DEVICE_API}:program_text")(wasm, prepack, target.caps.threads, MEMORY_PAGES)


BACKEND = Backend("wasm", "cpu", "program", check_runnable=check_runnable,
                  start=llvm.start_workers, compiler=llvm, link=build_wasm, program=program, entries=build_entries)
