"""The base every device module shares (OpenCL, GL, WebGL, WebGPU, wasm): a program + launch plan + constants run
on a device, and the call protocol of the CPU module (numpy arrays, raw pointers, weight tokens, size symbols).

Framework-free (numpy and ctypes only). A subclass opens its device and places its buffers (`__post_init__`), binds
a plan step to its device (`_bind`), grows its buffers for a larger size of the symbol (`_grow_to`) and runs one
call (`_run`). The host runs the plan: each step launches one kernel of the program over device buffers: the inputs,
the outputs, the constants (uploaded once) and one workspace sized by the memory plan (operands are byte offsets into
it). Host <-> device copies happen only at the graph's edges: inputs before the first launch, outputs after the
last. The weights (`prepack_inputs`) stay held on the device and are uploaded again only when they changed
(runtime/weights.py: the caller's token, the weights' fingerprint). The launches marked `prepack` (what reads
weights only: a batch norm's scale, a weight's transpose) run on the first call and again only after such an upload
(`prepack_runs` counts them).

A module with size symbols (`symbols`, from a graph with a symbolic batch: fxc/driver/rows.py) binds them from the
input shapes at each call (runtime/symbols.py's rules: InputError outside the range), grows its input, output and
workspace buffers when a larger size comes (the workspace's symbolic region is `row_bytes` per unit of the
symbol), and runs the plan expanded for that size (runtime/row_plan.py: launches per block of rows, operand offsets
moved to the block's rows), cached per size.
"""
from __future__ import annotations

import atexit
import collections
import ctypes
import sys
import threading
from dataclasses import dataclass, field

import numpy as np

from ..errors import InputError
from .row_plan import expand, shape_at
from .symbols import bind_symbols
from .tensors import TensorSpec, allocate, check_inputs, nbytes, np_dtype
from .weights import HeldWeights, Weights, token_of


@dataclass
class DeviceModule:
    target: str                         # the target string, e.g. "opencl -device=0"
    source: str                         # the device program (OpenCL C, GLSL, the browser targets' JSON)
    inputs: list
    outputs: list
    consts: list
    workspace_bytes: int
    plan: list                          # Launch (runtime/launch.py)
    kernels: list = field(default_factory=list)     # one line per fused group
    prepack_inputs: list = field(default_factory=list)      # the weights: inputs held on the device (weights.py)
    profiled: bool = False
    kernel_flops: list = field(default_factory=list)
    intermediate_bytes: int = 0
    symbols: list = field(default_factory=list)     # size symbols (dicts name, min, max, divisor); [] when static
    row_bytes: int = 0                  # workspace bytes per unit of the symbol, after workspace_bytes
    device: object = field(default=None, repr=False, compare=False)     # the opened device (the build's filled
    #                                                                     Target's); None: opened from `target`
    offload: list = field(default_factory=list)     # the -libs= regions and every op's reason (docs/byoc.md)
    prepack_runs: int = field(default=0, init=False)        # calls that ran the prepack launches
    _prepacked: bool = field(default=False, init=False, repr=False)     # their results are in the workspace
    exports_symbols = True      # a symbolic batch exports (format 2: row launches) and runs from the artifact

    def _init_call_state(self) -> None:
        """The call state every device module keeps: its weights and what it holds of them (runtime/weights.py), the
        bytes of inputs the last call uploaded, profiled times, and one lock (one call at a time: the device buffers
        are the module's own)."""
        self.weights = Weights(self.prepack_inputs, [nbytes(self.inputs[i]) for i in self.prepack_inputs])
        self.held = HeldWeights()
        self.uploaded_bytes = 0
        self._times: dict = {}
        self._lock = threading.Lock()

    def _weights_unchanged(self, ins: list, token) -> tuple:
        """(whether the held weights are this call's, their fingerprint): ins are the call's arrays."""
        fingerprint = self.weights.fingerprint([a.ctypes.data for a in ins]) if token is not None else None
        return self.held.holds(token, fingerprint), fingerprint

    # -- size symbols --------------------------------------------------------------------------------------
    def sizes(self, shapes) -> dict:
        """{symbol: value} from the input shapes (InputError where they break the compiled range)."""
        return bind_symbols(self.inputs, shapes, self.symbols) if self.symbols else {}

    def output_shapes(self, sizes: dict) -> list:
        return [shape_at(s, sizes) for s in self.outputs]

    def _size(self, sizes) -> int | None:
        if not self.symbols:
            return None
        if not sizes:
            raise InputError("this module has symbolic sizes: run it with the sizes of its inputs "
                             "(sizes=module.sizes(shapes))")
        return int(sizes[self.symbols[0]["name"]])

    def _pairs(self, s) -> list:
        """[(bound launch, plan step)] of a call at size s (the static plan's when s is None)."""
        if s is None:
            return self._static
        got = self._at.get(s)
        if got is None:
            if len(self._at) >= 64:
                self._at.clear()
            got = self._at[s] = [(self._bind(st, offs), st) for st, offs in expand(self.plan, s)]
        return got

    # -- calls -------------------------------------------------------------------------------------------
    def check_inputs(self, arrays) -> list:
        return check_inputs(self.inputs, arrays, self.symbols)

    def __call__(self, *arrays):
        """numpy in, numpy out (a list when the module has several outputs)."""
        if len(arrays) == len(self.inputs):     # the sizes (their range) before any copy: a 2**62-row input never is
            self.sizes([np.shape(a) for a in arrays])
        ins = allocate(lambda: self.check_inputs(arrays))
        sizes = self.sizes([a.shape for a in ins])
        outs = allocate(lambda: [np.empty(shape, np_dtype(s.dtype)) for s, shape in
                                 zip(self.outputs, self.output_shapes(sizes))])
        self.run_arrays(ins, outs, None, sizes)
        return outs[0] if len(outs) == 1 else outs

    def run_arrays(self, ins: list, outs: list, token=None, sizes=None) -> None:
        """Run on contiguous numpy arrays (outs are written). token: (addresses of the prepack_inputs, (their
        objects, versions)) naming the current weights; None uploads every input. sizes: the symbols' values
        (`sizes(shapes)`) for a module with symbolic sizes."""
        s = self._size(sizes)
        with self._lock:          # (the browser modules' _run takes no size: they have no symbolic builds)
            self._run(ins, outs, token) if s is None else self._run(ins, outs, token, s)

    def _to_launch(self, unchanged: bool, pairs: list) -> list:
        """The launches of this call (pairs: [(bound launch, step)]): all of them, or (weights held and
        prepacked already) the main ones."""
        if unchanged and self._prepacked:
            return [x for x, st in pairs if not st.prepack]
        self._prepacked = True
        self.prepack_runs += any(st.prepack for st in self.plan)
        return [x for x, _ in pairs]

    def run_prepared(self, in_array, out_ptrs: list, token=None, sizes=None) -> None:
        """The CPU Module's pointer interface (the torch capture): a ctypes array of input addresses, output
        addresses, the token (addresses, (objects, versions)) of the weights, and the symbols' values."""
        self.run_pointers([in_array[i] for i in range(len(self.inputs))], out_ptrs, None, sizes, token)

    def run_pointers(self, in_ptrs: list, out_ptrs: list, prepack_token=None, sizes=None, token=None) -> None:
        if token is None:
            token = token_of((in_ptrs[i] for i in self.prepack_inputs), prepack_token)
        ins = [_view(p, s, sizes) for p, s in zip(in_ptrs, self.inputs)]
        outs = [_view(p, s, sizes) for p, s in zip(out_ptrs, self.outputs)]
        self.run_arrays(ins, outs, token, sizes)

    def wake(self) -> None:
        """Nothing to wake: the device's queue is always ready (the CPU module wakes its worker threads)."""

    def use_openmp(self) -> None:
        """No host threads run kernels here (the CPU module switches to OpenMP's team)."""

    # -- profiling ---------------------------------------------------------------------------------------
    def timed(self, kernel: str, ns: int) -> None:
        """A launch of `kernel` took `ns` on the device (a profiled module's launches)."""
        t = self._times.get(kernel)
        if t is None:
            from .cpu.profile import SAMPLES  # deferred: profiled modules only (the load's size budget)
            t = self._times[kernel] = [0, 0, collections.deque(maxlen=SAMPLES)]
        t[0] += ns
        t[1] += 1
        t[2].append(ns / 1e3)

    def profile(self, reset: bool = False) -> list:
        """Per-kernel device times (the device's timers) since the last reset, slowest first: kernel, calls,
        total_ms, mean_us, median_us and min_us (of the last SAMPLES launches), share."""
        if not self.profiled:
            raise InputError("this module has no kernel timers; build it with profile=True or FXC_PROFILE=1")
        from .cpu.profile import stats_us  # deferred: profiled modules only (the load's size budget)
        total = sum(t for t, _, _ in self._times.values()) or 1
        rows = [{"kernel": k, "calls": n, "total_ms": t / 1e6, "mean_us": t / 1e3 / max(n, 1), "share": t / total}
                | dict(zip(("median_us", "min_us"), stats_us(kept))) for k, (t, n, kept) in self._times.items()]
        if reset:
            self._times.clear()
        return sorted(rows, key=lambda r: -r["total_ms"])

    def profile_table(self, top: int | None = None, reset: bool = False) -> str:
        from .cpu.profile import format_profile  # deferred: profiled modules only (the load's size budget)
        return format_profile(self.profile(reset), top)

    def print_profile_at_exit(self) -> None:
        if self.profiled:
            atexit.register(lambda: self._times and print(self.profile_table(), file=sys.stderr))

    def launches(self) -> list:
        """One line per launch: kernel and geometry (what fxc.explain shows)."""
        return [f"{s.kernel}: grid {'x'.join(map(str, s.grid))}, work-group {'x'.join(map(str, s.block))}"
                for s in self.plan]


def _view(address: int, spec: TensorSpec, sizes=None) -> np.ndarray:
    """A numpy array over `address` holding a contiguous tensor of `spec` (no copy) at the symbols' `sizes`."""
    dt = np_dtype(spec.dtype)
    shape = shape_at(spec, sizes) if sizes else spec.shape
    n = int(np.prod(shape, dtype=np.int64))
    if n == 0:
        return np.empty(shape, dt)
    raw = (ctypes.c_uint8 * (n * dt.itemsize)).from_address(int(address))
    return np.frombuffer(raw, dt).reshape(shape)
