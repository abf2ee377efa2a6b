"""`tvm.target`: TVM target strings and constructors, as the fxc target each builds for.

    Target("llvm -mcpu=skylake-avx512")  -> "llvm -mcpu=skylake-avx512"   (-keys, -model, -device=arm_cpu dropped)
    Target("cuda"), cuda()               -> "opencl", with a FacadeNote: fxc has no CUDA backend; OpenCL runs on the
                                            same NVIDIA GPUs (tvm.cuda(0) is fxc's OpenCL device)
    Target("opencl -device=mali")        -> "opencl" (TVM's -device named a schedule family; fxc's picks a device)
    arm_cpu("rasp3b"), rasp()            -> fxc's board alias "rasp3b" (rasp4b, rasp4b64 likewise)
    "opengl", "webgl", "webgpu", "wasm"  -> themselves

Other kinds (rocm, vulkan, metal, c, hexagon, ...) and CUDA's libraries (-libs=cudnn) raise UnsupportedAPIError;
an option fxc does not know is fxc's TargetError at the build.
"""
from __future__ import annotations

import shlex
import types

from .finder import module_getattr
from .ndarray import note
from .unsupported import UnsupportedAPIError, missing_member

KINDS = ("llvm", "opencl", "opengl", "webgl", "webgpu", "wasm")
CUDA = ("cuda", "nvptx")
DROPPED = {"keys", "model", "tag", "max_num_threads", "thread_warp_size", "arch", "max_threads_per_block",
           "max_shared_memory_per_block", "registers_per_block", "link-params", "opt-level"}
TVM_OPENCL_FAMILIES = ("mali", "intel_graphics", "adreno")
ARM_BOARDS = ("rasp3b", "rasp4b", "rasp4b64", "rasp3b64")
FXC_KINDS_NOTE = "fxc builds for 'llvm' (-mcpu/-mtriple/-mattr), 'cuda' (as 'opencl'), 'opencl', 'opengl', " \
                 "'webgl', 'webgpu', 'wasm' and the boards of arm_cpu()"


def to_fxc(spec: str) -> str:
    """The fxc target string of a TVM target string (see the module doc)."""
    try:
        words = shlex.split(spec)
    except ValueError as e:
        raise UnsupportedAPIError(f"tvm.target.Target({spec!r})", f"the string does not parse ({e})") from None
    if not words:
        raise UnsupportedAPIError("tvm.target.Target('')", "name a target, e.g. 'llvm'")
    kind, options = words[0], []
    if kind in ARM_BOARDS:
        return spec
    if kind not in KINDS + CUDA:
        raise UnsupportedAPIError(f"target {kind!r}", FXC_KINDS_NOTE)
    for word in words[1:]:
        key, _, value = word.lstrip("-").partition("=")
        if key == "libs":
            raise UnsupportedAPIError(f"target option -libs={value} ({spec!r})", "fxc generates every kernel itself; "
                                      "leave -libs out")
        if key == "device" and (value == "arm_cpu" or (kind == "opencl" and value in TVM_OPENCL_FAMILIES)):
            continue        # a TVM schedule family, not a device: fxc reads the device's own capabilities
        if key not in DROPPED:
            options.append(word)
    if kind in CUDA:
        note(f"target {spec!r}: fxc has no CUDA backend; it builds OpenCL, which runs on the same NVIDIA GPUs "
             f"(tvm.cuda(0) / tvm.gpu(0) is fxc's OpenCL device)")
        return "opencl"
    return " ".join([kind] + options)


class Target:
    """A target of the facade: `str(target)` and `.fxc` are the fxc target it builds for, `.kind.name` its kind."""

    def __init__(self, target, host=None):
        if isinstance(target, Target):
            self.spec, self.fxc = target.spec, target.fxc
        elif isinstance(target, str):
            self.spec, self.fxc = target, to_fxc(target)
        else:
            raise UnsupportedAPIError(f"tvm.target.Target({type(target).__name__})", "give the target as a string, "
                                      "e.g. Target('llvm -mcpu=haswell')")
        self.host = check_host(host)

    @property
    def kind(self):
        return types.SimpleNamespace(name=self.fxc.split()[0])

    def __str__(self):
        return self.fxc

    def __repr__(self):
        return f"Target({self.fxc!r})" + (f" (from {self.spec!r})" if self.spec != self.fxc else "")

    def __eq__(self, other):
        return isinstance(other, Target) and other.fxc == self.fxc

    def __hash__(self):
        return hash(self.fxc)

    __getattr__ = missing_member("tvm.target.Target", default="the facade's Target has kind, host and str(); fxc "
                                 "reads the device's capabilities itself")


def check_host(host):
    """A target host: fxc's host code is its own C/Python runtime, so only an llvm host (or none) is accepted."""
    if host is None:
        return None
    spec = host.spec if isinstance(host, Target) else str(host)
    if spec.split()[0] != "llvm":
        raise UnsupportedAPIError(f"target host {spec!r}", "fxc's host side runs on this CPU; pass host='llvm' or "
                                  "leave it out")
    return spec


def create(spec) -> Target:
    """`tvm.target.create(...)` (before TVM 0.8): Target(spec)."""
    return Target(spec)


def cuda(model: str = "unknown", arch=None, options=None) -> Target:
    """TVM's CUDA target: fxc's "opencl" (see the module doc)."""
    return Target("cuda")


def arm_cpu(model: str = "unknown", options=None) -> Target:
    """A Raspberry Pi: fxc's board alias of the same name (its triple, CPU and NEON)."""
    if model not in ARM_BOARDS:
        raise UnsupportedAPIError(f"tvm.target.arm_cpu({model!r})", f"fxc knows the boards {', '.join(ARM_BOARDS)}; "
                                  f"for another ARM CPU give the target as 'llvm -mtriple=aarch64-linux-gnu "
                                  f"-mattr=+neon' (or armv7l-linux-gnueabihf)")
    return Target(model)


def rasp(options=None) -> Target:
    return arm_cpu("rasp3b")


def mali(model: str = "unknown", options=None) -> Target:
    return Target("opencl")


def intel_graphics(model: str = "unknown", options=None) -> Target:
    return Target("opencl")


__getattr__ = module_getattr("tvm.target", default=FXC_KINDS_NOTE)
