"""The OpenGL device API (moderngl only): a headless EGL context, compute shaders compiled once per process.

    dev = open_device()                     # the process's GL context (EGL, no window), GL >= 4.3
    dev.info                                # what the compiler reads (renderer, work-group and storage limits)
    prog = dev.program(source)              # a compute shader, compiled in the GL thread
    dev.run(fn, *args)                      # fn on the thread that owns the context (runtime/thread.py)
    split_program(program)                  # kernel name -> shader of a program of fxc.backends.glsl

GL calls run on one thread that owns the context (a context is current in one thread; torch.compile builds in
a background thread). The module that runs a plan on it is runtime/opengl/module.py. Failures are named fxc errors:
TargetError (no moderngl, no EGL / GL context, GL older than 4.3), CompileError (the driver rejected a shader; with
the source and the log).
"""
from __future__ import annotations

import functools
import hashlib

from ...errors import CompileError, TargetError
from ...target import Caps, Target
from ..thread import DeviceThread

INSTALL = ("install Mesa's EGL and GL drivers: on Debian `apt-get install libegl1 libegl-mesa0 libgl1-mesa-dri` "
           "(llvmpipe, a CPU device), or your GPU's GL driver; and `pip install moderngl` (the fxc[gl] extra)")
_KERNEL_MARK = "// fxc_kernel "


def split_program(program: str) -> dict:
    """kernel name -> its compute shader's source, from a program text of fxc.backends.glsl."""
    out = {}
    for part in program.split(_KERNEL_MARK)[1:]:
        name, src = part.split("\n", 1)
        out[name.strip()] = src
    return out


def _moderngl():
    try:
        import moderngl  # deferred: moderngl is optional (the fxc[gl] extra)
    except ImportError as e:
        raise TargetError(f"the opengl target needs moderngl ({e}); {INSTALL}") from None
    return moderngl


class Device:
    """The process's headless GL context, owned by one thread, with a cache of compiled shaders."""

    def __init__(self):
        self.thread = DeviceThread()
        self.ctx, info, extensions = self.thread.run(self._open)      # GL queries only in the GL thread
        self.mgl = _moderngl()
        self.info = {
            "name": str(info.get("GL_RENDERER", "?")), "driver": str(info.get("GL_VERSION", "?")),
            "vendor": str(info.get("GL_VENDOR", "?")), "version_code": int(self.ctx.version_code),
            "max_work_group_size": int(info.get("GL_MAX_COMPUTE_WORK_GROUP_INVOCATIONS", 128) or 128),
            "local_memory_bytes": 32768,        # GL 4.3's guaranteed GL_MAX_COMPUTE_SHARED_MEMORY_SIZE
            "max_storage_bytes": int(info.get("GL_MAX_SHADER_STORAGE_BLOCK_SIZE", 2 ** 24) or 2 ** 24),
            "extensions": sorted(extensions),
        }
        self._programs: dict = {}

    @staticmethod
    def _open():
        mgl = _moderngl()
        try:
            ctx = mgl.create_standalone_context(backend="egl")
        except Exception as e:      # moderngl / glcontext raise plain exceptions for a missing libEGL or driver
            raise TargetError(f"no OpenGL context could be created through EGL ({type(e).__name__}: {e}); "
                              f"{INSTALL}") from None
        if ctx.version_code < 430:
            raise TargetError(f"the opengl target needs OpenGL 4.3 (compute shaders, storage buffers); this "
                              f"context ({ctx.info.get('GL_RENDERER')}) has {ctx.version_code // 100}."
                              f"{ctx.version_code % 100 // 10}; {INSTALL}")
        return ctx, dict(ctx.info), set(ctx.extensions)

    def __str__(self):
        return f"{self.info['name']} (OpenGL {self.info['driver']})"

    def run(self, fn, *args):
        return self.thread.run(fn, *args)

    def program(self, source: str):
        """The compute shader of `source`, compiled once per process (in the GL thread)."""
        key = hashlib.sha256(source.encode()).hexdigest()
        prog = self._programs.get(key)
        if prog is None:
            prog = self._programs[key] = self.run(self._compile, source)
        return prog

    def _compile(self, source: str):
        try:
            return self.ctx.compute_shader(source)
        except Exception as e:
            raise CompileError(f"the GL driver of {self} rejected a generated compute shader", source, str(e)) from None


@functools.lru_cache(maxsize=None)
def open_device(spec: str | None = None) -> Device:
    """The GL device of this process (one context; `spec` is accepted for symmetry with OpenCL and ignored)."""
    return Device()


def opengl_caps(info: dict) -> Caps:
    """Caps of a GL 4.3+ context (Device.info): 32-bit indices, no float64 / float16 / bfloat16 (int64 is computed
    in 32 bits where provably exact: fxc.backends.glsl), GL's shared-memory minimum."""
    return Caps(vector_bits=128, vector_registers=0, threads=1, features=frozenset(),
                local_memory_bytes=int(info["local_memory_bytes"]),
                max_work_group_size=min(1024, int(info["max_work_group_size"])), index_bits=32,
                dtypes=frozenset({"float32", "int8", "int16", "int32", "int64", "uint8", "bool"}), scatter=True,
                math=Caps().math | {"erfc", "lgamma", "expm1", "log1p", "asinh", "acosh", "atanh"})


def open_target(target: Target) -> Target:
    """An opengl target filled: the process's GL context, opened, and its Caps."""
    device = open_device(None)
    return target.with_device(device, opengl_caps(device.info))
