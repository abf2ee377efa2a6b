"""The OpenGL device API and module (numpy + moderngl only): a headless EGL context, compute shaders, one arena.

    dev = open_device()                     # the process's GL context (EGL, no window), GL >= 4.3
    dev.info                                # what the compiler reads (renderer, work-group and storage limits)
    m = GLModule(target, program, inputs, outputs, consts, workspace_bytes, plan)   # what fxc.driver.lower_gpu makes

A GLModule keeps all of its tensors in one storage buffer, the arena: a 64-byte header (word 0: fxc_err), then
the inputs, outputs, constants and the planned workspace, each 64-byte aligned. Every kernel of the program
(fxc.backends.glsl: compute shaders after `// fxc_kernel <name>` lines) sees the arena through three views
bound to it, and a launch sets the byte offsets of its operands as uniforms, then dispatches its launch
geometry; a memory barrier separates launches. Inputs are written before the first launch and outputs read
after the last; weights (`prepack_inputs`) stay in the arena until they change (DeviceModule's rules).

GL calls run on one thread that owns the context (a context is current in one thread; torch.compile builds in
a background thread). Failures are named fxc errors: TargetError (no moderngl, no EGL / GL context, GL older
than 4.3, a model larger than one storage buffer), CompileError (the driver rejected a shader; with the source
and the log), ExecutionError (integer division by zero; an int64 value beyond 32 bits).
"""
from __future__ import annotations

import functools
import hashlib
import queue
import threading
import time
from dataclasses import dataclass

import numpy as np

from ...errors import CompileError, ExecutionError, IndexOutOfRangeError, TargetError, index_error_message
from ...target import Caps, Target

INSTALL = ("install Mesa's EGL and GL drivers: on Debian `apt-get install libegl1 libegl-mesa0 libgl1-mesa-dri` "
           "(llvmpipe, a CPU device), or your GPU's GL driver; and `pip install moderngl` (the fxc[gl] extra)")
MAX_GROUPS = 65535          # work-groups per dispatch axis that GL 4.3 guarantees
HEADER = 64                 # bytes before the first tensor in the arena (word 0: the error flag)
_ALIGN = 64
_KERNEL_MARK = "// fxc_kernel "


def dispatch_of(grid: tuple) -> tuple:
    """(work-groups per axis x, y, z, the grid axis folded into a spare axis or None): a grid axis longer than
    MAX_GROUPS is split over itself and the first unused axis (the shader recombines it, and the surplus
    work-groups return at once)."""
    dims, fold = list(grid) + [1] * (3 - len(grid)), None
    for a, g in enumerate(grid):
        if g > MAX_GROUPS:
            if fold is not None or len(grid) >= 3:
                raise TargetError(f"a launch of {grid} work-groups exceeds GL's {MAX_GROUPS} per axis")
            fold = a
            dims[a], dims[len(grid)] = MAX_GROUPS, -(-g // MAX_GROUPS)
    return tuple(dims), fold


def split_program(program: str) -> dict:
    """kernel name -> its compute shader's source, from a program text of fxc.backends.glsl."""
    out = {}
    for part in program.split(_KERNEL_MARK)[1:]:
        name, src = part.split("\n", 1)
        out[name.strip()] = src
    return out


class _GLThread:
    """The thread that owns a device context (GL, or the browser's driver): run(fn, *args) executes fn there and
    returns or raises its result."""

    def __init__(self, name: str = "fxc-gl"):
        self.q: queue.Queue = queue.Queue()
        self.name = name
        threading.Thread(target=self._loop, name=name, daemon=True).start()

    def _loop(self):
        while True:
            fn, args, box, done = self.q.get()
            try:
                box.append((True, fn(*args)))
            except BaseException as e:     # handed back to the caller's thread
                box.append((False, e))
            done.set()

    def run(self, fn, *args):
        if threading.current_thread().name == self.name:
            return fn(*args)
        box, done = [], threading.Event()
        self.q.put((fn, args, box, done))
        done.wait()
        ok, value = box[0]
        if not ok:
            raise value
        return value


def _moderngl():
    try:
        import moderngl
    except ImportError as e:
        raise TargetError(f"the opengl target needs moderngl ({e}); {INSTALL}") from None
    return moderngl


class Device:
    """The process's headless GL context, owned by one thread, with a cache of compiled shaders."""

    def __init__(self):
        self.thread = _GLThread()
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


from ..device import DeviceModule  # noqa: E402  (after open_device: device_module is generic)
from ..rows import expand  # noqa: E402


def _aligned(n: int) -> int:
    return (n + _ALIGN - 1) // _ALIGN * _ALIGN


def place_arena(m, limit: int, api: str, device: str, sizes: dict | None = None) -> None:
    """Place a module's tensors in its one storage buffer (the GL and WebGPU arenas): HEADER bytes, then the inputs,
    outputs and constants aligned, then the workspace. Sets m.consts (contiguous), m._in_at, m._out_at,
    m._const_at, m._ws_at and m.arena_bytes; a TargetError when the arena exceeds the device's binding limit.
    sizes: the size symbols' values the arena holds (a module with symbolic sizes: its tensors and the workspace's
    symbolic region, `m.row_bytes` per unit of the symbol, at those sizes)."""
    from ..rows import nbytes_at
    m.consts = [np.ascontiguousarray(c) for c in m.consts]
    at, m._in_at, m._out_at, m._const_at = HEADER, [], [], []
    for specs, offs in ((m.inputs, m._in_at), (m.outputs, m._out_at)):
        for s in specs:
            offs.append(at)
            at = _aligned(at + nbytes_at(s, sizes))
    for c in m.consts:
        m._const_at.append(at)
        at = _aligned(at + c.nbytes)
    m._ws_at = at
    rows = getattr(m, "row_bytes", 0) * next(iter(sizes.values())) if sizes else 0
    m.arena_bytes = _aligned(at + m.workspace_bytes + rows)
    if m.arena_bytes > limit:
        mib = 2 ** 20
        raise TargetError(f"the model needs {m.arena_bytes / mib:.1f} MiB of {api} storage but {device} binds at "
                          f"most {limit / mib:.1f} MiB in one storage buffer; use a smaller batch or the opencl target")


@dataclass
class GLModule(DeviceModule):
    """A DeviceModule whose device is the GL context: one arena buffer, a compute shader per kernel."""

    def __post_init__(self):
        self.device = open_device(None) if self.device is None else self.device
        self._capacity, self._at, self._static = 0, {}, None
        if not self.symbols:        # (a symbolic module places its arena at its first call's size: _grow_to)
            place_arena(self, int(self.device.info["max_storage_bytes"]), "GL", str(self.device))
        shaders = split_program(self.source)
        missing = sorted({st.kernel for st in self.plan} - set(shaders))
        if missing:
            raise CompileError(f"the GL program lacks kernels {', '.join(missing[:3])}", self.source)
        self._programs = {name: self.device.program(src) for name, src in shaders.items()}
        if not self.symbols:
            self.device.run(self._setup)
        self._init_call_state()

    def _setup(self):
        ctx = self.device.ctx
        self._arena = ctx.buffer(reserve=self.arena_bytes)
        self._arena.write(np.zeros(HEADER // 4, np.int32).tobytes(), offset=0)
        for at, c in zip(self._const_at, self.consts):
            if c.nbytes:
                self._arena.write(c.tobytes(), offset=at)
        if not self.symbols:
            self._static = [(self._bind(st, offs), st) for st, offs in expand(self.plan, None)]

    def _grow_to(self, s: int) -> bool:
        """An arena for size s of the symbol (symbolic modules), placed anew (to twice the size it held, within the
        symbol's range) when s exceeds it; its contents then start empty (weights upload again). True when moved."""
        if s <= self._capacity:
            return False
        cap = max(s, min(2 * self._capacity, int(self.symbols[0].get("max", s))))
        place_arena(self, int(self.device.info["max_storage_bytes"]), "GL", str(self.device),
                    {self.symbols[0]["name"]: cap})
        if self._capacity:
            self.device.run(self._arena.release)
        self.device.run(self._setup)
        self._capacity, self._prepacked = cap, False
        self._at.clear()
        return True

    def _slot(self, kind: str, ix) -> int:
        if kind == "null":
            return -1
        if kind == "work":
            return self._ws_at
        return {"in": self._in_at, "out": self._out_at, "const": self._const_at}[kind][ix]

    def _bind(self, step, offsets: list):
        """The program, its uniforms with this launch's byte offsets, and the dispatch size."""
        prog = self._programs[step.kernel]
        uniforms = []
        for j, ((kind, ix), off) in enumerate(zip(step.args, offsets)):
            u = prog.get(f"fxc_b{j}", None)
            if u is not None:           # a parameter the shader never reads is compiled out
                uniforms.append((u, self._slot(kind, ix) + (off if kind != "null" else 0)))
        dims, _ = dispatch_of(tuple(step.grid))
        return prog, uniforms, dims, step.kernel

    def _run(self, ins: list, outs: list, token, s=None) -> None:
        from ..device import _token_key
        if s is not None and self._grow_to(s):
            self._resident = None           # the new arena holds no inputs yet
        key = _token_key(token)
        sample = self._weights_print(ins) if key is not None and self.prepack_inputs else None
        resident = key is not None and key == self._resident and sample == self._fingerprint_value
        upload = [i for i, a in enumerate(ins) if a.nbytes and not (resident and i in self.prepack_inputs)]
        self.uploaded_bytes = sum(ins[i].nbytes for i in upload)
        self._resident, self._fingerprint_value = key, sample
        self._resident_objects = None if token is None else token[1][0]
        err = self.device.run(self._execute, ins, outs, upload, self._to_launch(resident, self._pairs(s)))
        if err:
            self._prepacked = False
            words = np.frombuffer(self.device.run(self._arena.read, 16, 0), np.int32)
            self.device.run(self._arena.write, np.zeros(4, np.int32).tobytes(), 0)
            if err == 3:
                raise IndexOutOfRangeError(index_error_message(int(words[1]) - 1, int(words[2]), int(words[3])))
            if err == 1:
                raise ExecutionError("integer division by zero in a compiled kernel (eager PyTorch raises "
                                     "ZeroDivisionError here too); make the divisor nonzero or divide in floating "
                                     "point")
            raise ExecutionError("an int64 value beyond 32 bits reached a kernel of the opengl target, which computes "
                                 "integers in 32 bits (GLSL has no int64); keep int64 tensors within +-2**31 or use "
                                 "the llvm / opencl target")

    def _execute(self, ins, outs, upload, launches) -> int:
        mgl, ctx, arena = self.device.mgl, self.device.ctx, self._arena
        for k in range(3):
            arena.bind_to_storage_buffer(k)
        for i in upload:
            arena.write(ins[i].tobytes(), offset=self._in_at[i])
        ctx.memory_barrier(mgl.ALL_BARRIER_BITS)
        for prog, uniforms, dims, name in launches:
            for u, v in uniforms:
                u.value = v
            if self.profiled:
                ctx.finish()
                t0 = time.perf_counter_ns()
            prog.run(*dims)
            ctx.memory_barrier(mgl.SHADER_STORAGE_BARRIER_BIT)
            if self.profiled:
                ctx.finish()
                t = self._times.setdefault(name, [0, 0])
                t[0] += time.perf_counter_ns() - t0
                t[1] += 1
        ctx.memory_barrier(mgl.ALL_BARRIER_BITS)
        for at, o in zip(self._out_at, outs):
            if o.nbytes:
                o.reshape(-1).view(np.uint8)[:] = np.frombuffer(arena.read(o.nbytes, offset=at), np.uint8)
        return int(np.frombuffer(arena.read(4, offset=0), np.int32)[0])

    def launches(self) -> list:
        return [f"{s.kernel}: work-groups {'x'.join(map(str, s.grid))}, local size {'x'.join(map(str, s.block))}"
                for s in self.plan]
