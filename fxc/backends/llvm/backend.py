"""The llvm backend entry (fxc.backends.BACKENDS["llvm"]): a CPU's code as one shared library this process loads."""
from __future__ import annotations

from ...errors import TargetError
from ...target import host_cpu, host_features, host_triple, triple_arch
from ..backend import Backend
from . import compile as llvm
from .probe import bf16_dot_gain


def check_runnable(target) -> None:
    """TargetError when this host cannot run the target's code: another architecture (an ARM build on x86), or a
    CPU that lacks features the code uses (compiling and exporting for such a target is allowed; running is not)."""
    arch, here = triple_arch(target.triple), triple_arch(host_triple())
    if arch != here:
        raise TargetError(f"target {target}: its code is {arch} code and this machine runs {here}; compiling and "
                          f"exporting work here, running needs an {arch} machine: fxc.export the model and run it "
                          f"there (fxc.load, or the C entry point), or run its C program here under emulation "
                          f"(qemu-user: qemu-{'aarch64' if arch == 'aarch64' else arch} -L <sysroot>; docs/arm.md)")
    missing = sorted(target.caps.features - host_features())
    if missing:
        raise TargetError(f"target {target}: this host's CPU ({host_cpu()}) lacks {', '.join(missing)}; code "
                          f"built for it cannot run here. Compile for target='llvm' (the host) to run, or "
                          f"export the artifact and run it on a CPU that has these features")


BACKEND = Backend("llvm", "cpu", "library",
                  symbolic_module="fxc.runtime.cpu.dynamic:DynamicModule", check_runnable=check_runnable,
                  start=llvm.start_workers, cached_modules=True, bf16_gain=bf16_dot_gain, compiler=llvm,
                  link=llvm.build_library)
