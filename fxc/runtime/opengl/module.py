"""The OpenGL module (numpy + moderngl, through runtime/opengl/device.py): GLSL compute shaders + launch plan +
constants in one arena.

    m = GLModule(target, program, inputs, outputs, consts, workspace_bytes, plan)   # what fxc.driver.lower_gpu makes

A GLModule keeps all of its tensors in one storage buffer, the arena (runtime/arena.py): a 64-byte header (word 0:
fxc_err), then the inputs, outputs, constants and the planned workspace, each 64-byte aligned. Every kernel of the
program (fxc.backends.glsl: compute shaders after `// fxc_kernel <name>` lines) sees the arena through three views
bound to it, and a launch sets the byte offsets of its operands as uniforms, then dispatches its launch
geometry; a memory barrier separates launches. Inputs are written before the first launch and outputs read
after the last; the weights (`prepack_inputs`) stay held in the arena until they change (DeviceModule's rules,
runtime/weights.py). Failures are named fxc errors: TargetError (a model larger than one storage buffer),
CompileError (a kernel missing from the program), ExecutionError (integer division by zero; an int64 value beyond
32 bits), IndexOutOfRangeError.
"""
from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from ...errors import CompileError, ExecutionError, IndexOutOfRangeError, index_error_message
from ..arena import HEADER, place_arena
from ..device_module import DeviceModule
from ..launch import dispatch_of
from ..row_plan import expand
from .device import open_device, split_program


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
        if s is not None and self._grow_to(s):
            self.held.drop()                # the new arena holds no inputs yet
        unchanged, fingerprint = self._weights_unchanged(ins, token)
        upload = [i for i, a in enumerate(ins) if a.nbytes and not (unchanged and i in self.prepack_inputs)]
        self.uploaded_bytes = sum(ins[i].nbytes for i in upload)
        self.held.hold(token, fingerprint)
        err = self.device.run(self._execute, ins, outs, upload, self._to_launch(unchanged, self._pairs(s)))
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
                self.timed(name, time.perf_counter_ns() - t0)
        ctx.memory_barrier(mgl.ALL_BARRIER_BITS)
        for at, o in zip(self._out_at, outs):
            if o.nbytes:
                o.reshape(-1).view(np.uint8)[:] = np.frombuffer(arena.read(o.nbytes, offset=at), np.uint8)
        return int(np.frombuffer(arena.read(4, offset=0), np.int32)[0])

    def launches(self) -> list:
        return [f"{s.kernel}: work-groups {'x'.join(map(str, s.grid))}, local size {'x'.join(map(str, s.block))}"
                for s in self.plan]
