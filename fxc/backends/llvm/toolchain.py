"""The C toolchain of an llvm target, chosen by its triple: this host's `gcc` for code this machine runs natively,
Debian's cross gcc (with its libc and libgomp under the sysroot) for another architecture.

    toolchain("x86_64-pc-linux-gnu").cc          # "gcc" on an x86-64 host
    toolchain("aarch64-linux-gnu").cc            # "aarch64-linux-gnu-gcc" there; TargetError naming the Debian
                                                 # package when it is not installed

The same table names the qemu-user emulator that runs the target's programs on another machine (tests, docs)."""
from __future__ import annotations

import shutil
from dataclasses import dataclass

from ...errors import TargetError
from ...target import host_triple, triple_arch


@dataclass(frozen=True)
class Toolchain:
    cc: str                 # the C compiler (and linker driver)
    sysroot: str = ""       # the target's libc, libm, libgomp (qemu -L); "" for the host's own
    package: str = ""       # the Debian packages that install cc and the target's libc
    qemu: str = ""          # the qemu-user binary that runs the target's programs (Debian qemu-user)

    def emulator(self) -> list:
        """The command prefix that runs one of the target's programs here: [] natively, else qemu-user with the
        sysroot (TargetError naming the Debian package when qemu is missing)."""
        if not self.qemu:
            return []
        if shutil.which(self.qemu) is None:
            raise TargetError(f"{self.qemu} is not installed: running {self.cc}'s programs on this machine needs "
                              f"qemu-user (Debian: apt-get install qemu-user)")
        return [self.qemu, "-L", self.sysroot]


NATIVE = Toolchain("gcc", package="gcc")
# triple_arch -> the Debian cross toolchain of that architecture (Debian/Ubuntu names; other distributions ship the
# same triplet-prefixed gcc under other package names)
CROSS = {
    "aarch64": Toolchain("aarch64-linux-gnu-gcc", "/usr/aarch64-linux-gnu",
                         "gcc-aarch64-linux-gnu libc6-dev-arm64-cross", "qemu-aarch64"),
    "arm": Toolchain("arm-linux-gnueabihf-gcc", "/usr/arm-linux-gnueabihf",
                     "gcc-arm-linux-gnueabihf libc6-dev-armhf-cross", "qemu-arm"),
}


def toolchain(triple: str) -> Toolchain:
    """The toolchain that compiles and links C for `triple`, checked to be installed (TargetError naming the Debian
    package otherwise, or naming the triples fxc can cross-compile for)."""
    arch = triple_arch(triple)
    if arch == triple_arch(host_triple()):
        chain = NATIVE
    elif arch in CROSS:
        chain = CROSS[arch]
    else:
        raise TargetError(f"no C toolchain for target triple {triple!r} on this {triple_arch(host_triple())} machine; "
                          f"fxc cross-compiles for {', '.join(CROSS)} (e.g. 'llvm -mtriple=aarch64-linux-gnu'), "
                          f"or compile on a {arch} machine")
    if shutil.which(chain.cc) is None:
        raise TargetError(f"{chain.cc} is not installed: the llvm target for {triple} links with it "
                          f"(Debian: apt-get install {chain.package})")
    return chain
