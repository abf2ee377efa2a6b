"""The OpenCL module (numpy + pyopencl, through runtime/opencl/device.py): an OpenCL C program + launch plan +
constants over device buffers.

    m = OpenCLModule(target, program, inputs, outputs, consts, workspace_bytes, plan)  # fxc.driver.lower_gpu's

The buffers are the inputs, the outputs, the constants (uploaded once), one workspace sized by the memory plan and
the kernels' error words (ERROR_WORDS ints: a division by zero, an index out of range). A static module binds every
launch's kernel object once (its buffers never move); a symbolic one keeps one kernel object per kernel and sets each
launch's arguments before it; an external library's step ("clblast:sgemm", EXTERNAL) calls the library on the same
queue and buffers; a CLML region step runs, or fxc's launches after it do, as clml.choose decides for the device.
The call protocol, the weights held on the device and the symbols are DeviceModule's
(runtime/device_module.py).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ...errors import ExecutionError, IndexOutOfRangeError, TargetError, index_error_message
from ..device_module import DeviceModule
from ..row_plan import expand, nbytes_at, symbolic_dims
from ..tensors import nbytes
from . import clblast, clml
from .device import open_device

ERROR_WORDS = 8     # the kernels' fxc_err ints: a division by zero, an index out of range (op, index, size)
EXTERNAL = {"clblast:sgemm": clblast.sgemm, "clblast:sconvgemm": clblast.sconvgemm,     # a plan step
            clml.KERNEL: clml.run}                                                      # -> its call
CHECKS = {"clblast": clblast.check, "clml": clml.check}     # a library -> its install check (TargetError: the fix)


def check_libraries(plan: list) -> None:
    """TargetError naming the fix when a step of the plan calls a library this host lacks, or one this fxc does
    not know (an artifact of a newer fxc)."""
    for name in sorted({st.kernel.split(":")[0] for st in plan if st.call}):
        if name not in CHECKS:
            raise TargetError(f"the plan calls the external library {name!r}, which this fxc runtime does not "
                              f"know ({', '.join(CHECKS)}); load it with the fxc that exported it")
        CHECKS[name]()


def _attrs(target: str) -> list:
    return [tuple(w.lstrip("-").split("=", 1)) for w in target.split()[1:] if "=" in w]


@dataclass
class OpenCLModule(DeviceModule):
    """A DeviceModule whose device is an OpenCL device: a buffer per tensor, a kernel object per launch."""

    def __post_init__(self):
        check_libraries(self.plan)
        if self.device is None:         # (an artifact's module: opened from its target string)
            self.device = open_device(dict(_attrs(self.target)).get("device"))
        cl = self.device.cl
        self.consts = [np.ascontiguousarray(c) for c in self.consts]
        sizes = ([nbytes(s) for s in self.inputs + self.outputs if not symbolic_dims(s)]
                 + [c.nbytes for c in self.consts] + [self.workspace_bytes])
        self.device.check_memory(sizes)
        self._program = self.device.program(self.source)
        buf = self.device.buffer
        self._in = [None if symbolic_dims(s) else buf(nbytes(s)) for s in self.inputs]
        self._out = [None if symbolic_dims(s) else buf(nbytes(s)) for s in self.outputs]
        self._const = [buf(c.nbytes) for c in self.consts]
        for b, c in zip(self._const, self.consts):
            if c.nbytes:
                cl.enqueue_copy(self.device.queue, b, c)
        self._ws = None if self.symbols else buf(self.workspace_bytes)
        self._err = buf(4 * ERROR_WORDS)
        self._zero = np.zeros(ERROR_WORDS, np.int32)
        cl.enqueue_copy(self.device.queue, self._err, self._zero)
        self._capacity = 0              # the size of the symbol the buffers hold (symbolic modules)
        self._at: dict = {}             # size -> [(bound launch, step)] (symbolic modules)
        self._kernels: dict = {}        # kernel name -> its one kernel object (symbolic modules)
        self._static = None if self.symbols else [(self._bind(st, offs), st) for st, offs in
                                                  expand(clml.choose(self.plan, self.device, self.source), None)]
        self._init_call_state()

    def _bind(self, step, offsets: list):
        """(kernel object, global size, local size, name, arguments): a static module's kernel objects have their
        arguments set once (the buffers never move: arguments None); a symbolic module's share one object per
        kernel and set the arguments of each launch before it."""
        if step.kernel in EXTERNAL:     # (queue, call, [(buffer, offset)]) run on these buffers, in place
            ops = [(self._ws if kind == "work" else {"in": self._in, "out": self._out, "const": self._const}[kind][ix],
                    off) for (kind, ix), off in zip(step.args, offsets)]
            return EXTERNAL[step.kernel], None, None, step.kernel, (self.device.queue, step.call, ops)
        args = []
        for (kind, ix), off in zip(step.args, offsets):
            if kind == "null":
                args += [None, np.uint64(0)]
                continue
            b = {"in": self._in, "out": self._out, "const": self._const}.get(kind)
            args += [self._ws if b is None else b[ix], np.uint64(off)]
        args.append(self._err)
        if self.symbols:
            k = self._kernels.get(step.kernel)
            if k is None:
                k = self._kernels[step.kernel] = self.device.cl.Kernel(self._program, step.kernel)
        else:
            k = self.device.cl.Kernel(self._program, step.kernel)
            k.set_args(*args)
            args = None
        gsize = tuple(int(g) * int(b) for g, b in zip(step.grid, step.block))
        return k, gsize, tuple(int(b) for b in step.block), step.kernel, args

    def _grow_to(self, s: int) -> bool:
        """Buffers for size s (symbolic modules): the symbolic inputs, outputs and the workspace reallocated when s
        exceeds what they hold (to twice that, within the symbol's range), the workspace's static part (packed
        weights) copied over. True when they moved."""
        if s <= self._capacity:
            return False
        cap = max(s, min(2 * self._capacity, int(self.symbols[0].get("max", s))))
        at = {self.symbols[0]["name"]: cap}
        self.device.check_memory([nbytes_at(x, at) for x in self.inputs + self.outputs]
                                 + [c.nbytes for c in self.consts] + [self.workspace_bytes + self.row_bytes * cap],
                                 f"the model at size {cap}")
        buf, cl = self.device.buffer, self.device.cl
        self._in = [buf(nbytes_at(x, at)) if symbolic_dims(x) else b for x, b in zip(self.inputs, self._in)]
        self._out = [buf(nbytes_at(x, at)) if symbolic_dims(x) else b for x, b in zip(self.outputs, self._out)]
        ws = buf(self.workspace_bytes + self.row_bytes * cap)
        if self._ws is not None and self.workspace_bytes:
            cl.enqueue_copy(self.device.queue, ws, self._ws, byte_count=self.workspace_bytes)
        self._ws, self._capacity = ws, cap
        self._at.clear()
        return True

    def _run(self, ins: list, outs: list, token, s=None) -> None:
        cl, q = self.device.cl, self.device.queue
        if s is not None and self._grow_to(s):
            self.held.drop()                # the moved buffers hold no inputs yet
        unchanged, fingerprint = self._weights_unchanged(ins, token)
        self.uploaded_bytes = 0
        for i, (b, a) in enumerate(zip(self._in, ins)):
            if a.nbytes and not (unchanged and i in self.prepack_inputs):
                cl.enqueue_copy(q, b, a, is_blocking=False)
                self.uploaded_bytes += a.nbytes
        self.held.hold(token, fingerprint)
        events = []
        for k, g, b, name, args in self._to_launch(unchanged, self._pairs(s)):
            if g is None:               # an external library's call (its event timed as a kernel's when profiled)
                ev = k(*args, self.profiled)
                if ev:
                    events.append((cl.Event.from_int_ptr(ev, retain=False), name))
                continue
            if args is not None:
                k.set_args(*args)
            events.append((cl.enqueue_nd_range_kernel(q, k, g, b), name))
        for b, o in zip(self._out, outs):
            if o.nbytes:
                cl.enqueue_copy(q, o, b, is_blocking=False)
        err = np.empty(ERROR_WORDS, np.int32)
        cl.enqueue_copy(q, err, self._err, is_blocking=True)
        if self.profiled:
            for ev, name in events:
                self.timed(name, ev.profile.end - ev.profile.start)
        if err[0] or err[1]:
            self._prepacked = False         # the error may come from a prepack launch: raise it again next time
        if err[1]:
            cl.enqueue_copy(q, self._err, self._zero)
            words = err.view(np.uint32).astype(np.uint64)
            index, size = (int(np.int64(words[k] | (words[k + 1] << np.uint64(32)))) for k in (3, 5))
            raise IndexOutOfRangeError(index_error_message(int(err[2]), index, size))
        if err[0]:
            cl.enqueue_copy(q, self._err, self._zero)
            raise ExecutionError("integer division by zero in a compiled kernel (eager PyTorch raises "
                                 "ZeroDivisionError here too); make the divisor nonzero or divide in floating point")
