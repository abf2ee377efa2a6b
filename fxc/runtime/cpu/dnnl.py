"""oneDNN (Debian libdnnl2, its 2.6 C API) at run time: what a CPU module or artifact with oneDNN steps needs.

    check()                     # the library loads, or a TargetError naming the Debian package
    requires(plan)              # ["dnnl"] for a plan (a CPU module's, or an artifact's) with oneDNN steps

The steps themselves run inside the module's own shared library: each is a call of `fxc_dnnl_run` (dnnl_shim.c
beside this file, compiled and linked with libdnnl.so.2 by fxc/backends/external/dnnl/shim.py) on the workspace,
input, output and constant addresses of its operands, with the step's parameters and its state (the primitive,
made at its first call and kept). So nothing is copied at a region's edges, and the exported C entry point calls
the same code.
"""
from __future__ import annotations

import ctypes
import functools

from ...errors import TargetError

SONAME = "libdnnl.so.2"
STEP_PREFIX = "fxc_dnnl_"        # the plan steps' names (fxc_dnnl_<step>_<routine>)
PACKAGES = "on Debian `apt-get install libdnnl2` (to build: libdnnl-dev)"


def check() -> None:
    """TargetError naming the fix when this host cannot load oneDNN."""
    _library()


@functools.lru_cache(maxsize=None)
def _library():
    try:
        return ctypes.CDLL(SONAME)
    except OSError:
        raise TargetError(f"the model calls oneDNN (-libs=dnnl) but {SONAME} is not installed here; install it: "
                          f"{PACKAGES}, or build without -libs=dnnl") from None


def requires(plan) -> list:
    """["dnnl"] when the plan's steps (names first) call oneDNN, else []."""
    return ["dnnl"] if any(str(step[0]).startswith(STEP_PREFIX) for step in plan) else []
