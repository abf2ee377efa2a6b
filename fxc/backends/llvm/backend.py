"""The llvm backend entry (fxc.backends.BACKENDS["llvm"]): a CPU's code as one shared library this process loads."""
from __future__ import annotations

from ...errors import TargetError
from ...target import host_cpu, host_features
from ..backend import Backend
from . import compile as llvm
from .probe import bf16_dot_gain


def check_runnable(target) -> None:
    """TargetError when this host's CPU lacks features the target's code uses (compiling and exporting for such a
    target is allowed; running is not)."""
    missing = sorted(target.caps.features - host_features())
    if missing:
        raise TargetError(f"target {target}: this host's CPU ({host_cpu()}) lacks {', '.join(missing)}; code "
                          f"built for it cannot run here. Compile for target='llvm' (the host) to run, or "
                          f"export the artifact and run it on a CPU that has these features")


BACKEND = Backend("llvm", "cpu", "library",
                  symbolic_module="fxc.runtime.cpu.dynamic:DynamicModule", check_runnable=check_runnable,
                  start=llvm.start_workers, cached_modules=True, bf16_gain=bf16_dot_gain, compiler=llvm,
                  link=llvm.build_library)
