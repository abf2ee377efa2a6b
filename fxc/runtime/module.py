"""A compiled module: kernels + execution plan + constants, callable on numpy arrays or raw pointers.
Framework-free (numpy and the target's device library only); framework wrappers live in fxc.capture."""
from __future__ import annotations

import ctypes
import operator
import os
from collections import OrderedDict
from dataclasses import dataclass, field

import numpy as np

from ..errors import InputError, TargetError, check_return_code
from .cpu.library import CpuLibrary, Workspace, pointer_array


@dataclass(frozen=True)
class TensorSpec:
    name: str
    shape: tuple
    dtype: str

    def describe(self) -> str:
        return f"{self.name}: {self.dtype}{list(self.shape)}"


def np_dtype(dtype: str):
    if dtype == "bfloat16":      # numpy has no bfloat16: its buffers are the raw 16-bit patterns
        return np.dtype(np.uint16)
    return np.dtype(np.bool_) if dtype == "bool" else np.dtype(dtype)


def _same_token(a, b) -> bool:
    """Tokens are (input addresses, objects, versions): equal addresses and versions, the very same objects."""
    if a is None or b is None or a[0] != b[0] or a[1][1] != b[1][1] or len(a[1][0]) != len(b[1][0]):
        return False
    return all(map(operator.is_, a[1][0], b[1][0]))


FINGERPRINT_WORDS = 4      # sampled words per prepacked input (fxc_fingerprint)
PREPACKED_SETS = 4         # weight sets a module keeps packed at once, a workspace each (_workspace_for)


def check_shape(spec, shape) -> None:
    if tuple(shape) != tuple(spec.shape):
        raise InputError(f"input {spec.name!r}: expected shape {list(spec.shape)}, got {list(shape)}; "
                         f"recompile for the new shape")


def check_inputs(specs, arrays, symbols=()) -> list:
    """The arrays as contiguous numpy arrays, once their count, dtypes and shapes are those of `specs` (InputError
    naming the input and the fix otherwise)."""
    if len(arrays) != len(specs):
        raise InputError(f"expected {len(specs)} inputs ({', '.join(s.describe() for s in specs)}), "
                         f"got {len(arrays)}")
    out = []
    for spec, a in zip(specs, arrays):
        a = np.asarray(a)
        if a.dtype != np_dtype(spec.dtype):
            raise InputError(f"input {spec.name!r}: expected dtype {spec.dtype}, got {a.dtype}; "
                             f"convert it with .astype({spec.dtype!r})")
        if not symbols:
            check_shape(spec, a.shape)
        out.append(np.ascontiguousarray(a))
    return out


@dataclass
class Module:
    target: str
    library: str                        # path of the shared library (cpu)
    inputs: list                        # TensorSpec
    outputs: list                       # TensorSpec
    consts: list                        # numpy arrays, in const-slot order
    workspace_bytes: int
    kernels: list = field(default_factory=list)     # one line per fused kernel
    intermediate_bytes: int = 0         # sum of intermediate sizes before memory sharing
    source: str = ""                    # generated LLVM IR (for debugging / export)
    prepack_inputs: list = field(default_factory=list)   # inputs read by the cached weight-packing step
    plan: list = field(default_factory=list)    # execution plan: (kernel, [(slot kind, index or byte offset)])
    kernel_flops: list = field(default_factory=list)   # per kernel (same order as `kernels`); 0 when unknown
    profiled: bool = False              # built with per-kernel timers (profile=True / FXC_PROFILE=1)
    target_spec: str = ""               # the full target string ("llvm -mcpu=haswell"); "" for `target`
    unrunnable: str = ""                # why this host cannot run the kernels (built for a CPU it is not), or ""
    symbols = ()                        # size symbols: a DynamicModule's (runtime/symbols.py)

    def __post_init__(self):
        self._lib = CpuLibrary(self.library)
        self.consts = [np.ascontiguousarray(c) for c in self.consts]
        self._const_ptrs = pointer_array([c.ctypes.data for c in self.consts])
        self._ws = Workspace(self.workspace_bytes)
        self._sets = OrderedDict()      # the prepacked inputs' addresses -> the workspace holding them packed
        self._samples = self._weight_samples()
        if self.profiled and os.environ.get("FXC_PROFILE", "0") not in ("", "0"):
            self.print_profile_at_exit()

    def _weight_samples(self):
        """(input index, byte offset) arrays of FINGERPRINT_WORDS evenly spaced 32-bit words of each input the prepack
        step reads, for the runtime's fxc_fingerprint; None without one."""
        if not self.prepack_inputs or self._lib.fingerprint is None:
            return None
        index, offsets = [], []
        for i in self.prepack_inputs:
            spec = self.inputs[i]
            nbytes = int(np.prod(spec.shape, dtype=np.int64)) * np_dtype(spec.dtype).itemsize
            if nbytes < 4:
                continue
            picks = sorted({k * (nbytes - 4) // max(FINGERPRINT_WORDS - 1, 1) // 4 * 4
                            for k in range(FINGERPRINT_WORDS)})
            index += [i] * len(picks)
            offsets += picks
        n = len(index)
        return (ctypes.c_int64 * max(n, 1))(*index), (ctypes.c_int64 * max(n, 1))(*offsets), n

    def _fingerprint(self, in_array):
        if self._samples is None:
            return None
        index, offsets, n = self._samples
        return self._lib.fingerprint(in_array, index, offsets, n)

    def profile(self, reset: bool = False) -> list:
        """Per-kernel times since the last reset: one dict per kernel (kernel, group, calls, total_ms, mean_us,
        share, gflops). Needs a module built with profile=True (or FXC_PROFILE=1)."""
        from . import profile as kernel_profile  # imported only when profiling
        c = kernel_profile.counters(self._lib.lib, len(self.kernels)) if self.profiled else None
        if c is None:
            raise InputError("this module has no kernel timers; build it with profile=True "
                             "(torch.compile(..., options={'profile': True})) or FXC_PROFILE=1")
        rows = kernel_profile.profile_rows(self.kernels, self.kernel_flops, c)
        if reset:
            c[:] = 0
        return rows

    def print_profile_at_exit(self) -> None:
        """Print `profile_table()` to stderr when the process ends (done for every module under FXC_PROFILE=1)."""
        if self.profiled:
            from . import profile as kernel_profile
            kernel_profile.print_at_exit(self._lib.lib, self.kernels, self.kernel_flops)

    def profile_table(self, top: int | None = None, reset: bool = False) -> str:
        """`profile()` as a text table, slowest kernel first."""
        from . import profile as kernel_profile
        return kernel_profile.format_profile(self.profile(reset), top)

    def use_openmp(self) -> None:
        """Run the parallel loops on OpenMP's team (PyTorch's, beside PyTorch) from now on, unless FXC_OPENMP=0:
        for a training step's graphs, whose calls follow PyTorch's own ops (runtime/cpu.py, openmp_mode)."""
        from .cpu.library import openmp_mode
        if self._lib.use_openmp is not None:
            self._lib.use_openmp(openmp_mode(training_step=True))

    def wake(self) -> None:
        """Wake the runtime's sleeping worker threads ahead of a call, so they are spinning by its first kernel:
        callers do this before preparing the inputs (the wake-up then overlaps that work)."""
        if self._lib.wake is not None:
            self._lib.wake()

    def run_pointers(self, in_ptrs: list, out_ptrs: list, prepack_token=None, sizes=None) -> None:
        """Run on raw addresses of contiguous buffers of the declared shapes/dtypes (no checks).

        prepack_token: (objects, versions), two tuples naming the current contents of the inputs in
        `prepack_inputs` (e.g. each weight tensor and its version counter). When it matches the previous
        call's (same objects, same versions, same addresses), the packed weights in the workspace are
        reused; None always repacks."""
        token = None if prepack_token is None else (tuple(in_ptrs[i] for i in self.prepack_inputs), prepack_token)
        self.run_prepared(pointer_array(in_ptrs), out_ptrs, token, sizes)

    def _workspace(self, sizes, ws=None) -> int:
        return (ws or self._ws).pointer()

    def _workspace_for(self, token) -> Workspace:
        """The workspace holding this token's weights packed: one per weight set (their addresses), up to
        PREPACKED_SETS, least recently used reused. Dynamo runs one graph for every instance of a class, so copies of
        a network share a build; alternating calls then repack nothing (the state's token still decides)."""
        if token is None:
            return self._ws
        sets, key = self._sets, token[0]
        ws = sets.get(key)
        if ws is None:
            if not sets:
                ws = self._ws
            elif len(sets) < PREPACKED_SETS:
                ws = Workspace(self.workspace_bytes)
            else:
                ws = sets.pop(next(iter(sets)))
            sets[key] = ws
        else:
            sets.move_to_end(key)
        return ws

    def run_prepared(self, in_array, out_ptrs: list, token=None, sizes=None) -> None:
        """run_pointers with the input addresses already a ctypes array and the whole token given:
        (addresses of the `prepack_inputs`, (objects, versions)). The very token object of the previous call on
        this thread is taken as unchanged without comparing it (a caller reuses one only while it has checked
        that the weights behind it are unchanged). Either way the packing is redone when a sample of the packed
        inputs' words differs from the last packing's (a write the version counter did not see, e.g. PyTorch's
        `p.data.copy_(w)`; a write missing every sampled word goes unseen)."""
        if self.unrunnable:
            raise TargetError(self.unrunnable)
        packs = self.prepack_inputs and self._lib.prepack is not None
        ws = self._workspace_for(token) if packs else self._ws
        args = (in_array, pointer_array(out_ptrs), self._const_ptrs, self._workspace(sizes, ws))
        if not packs:
            check_return_code(self._lib.run(*args), self._lib.index_error)
            return
        state = ws.state()
        last = state.get("prepacked")
        fingerprint = self._fingerprint(in_array)
        if token is None or (last is not token and not _same_token(last, token)) \
                or fingerprint != state.get("fingerprint"):
            state["prepacked"] = None
            check_return_code(self._lib.prepack(*args), self._lib.index_error)
            state["prepacked"], state["fingerprint"] = token, fingerprint
        check_return_code(self._lib.run_main(*args), self._lib.index_error)

    def check_inputs(self, arrays) -> list:
        return check_inputs(self.inputs, arrays)

    def __call__(self, *arrays):
        """numpy in, numpy out (a list when the module has several outputs)."""
        self.wake()
        ins = self.check_inputs(arrays)
        outs = [np.empty(s.shape, np_dtype(s.dtype)) for s in self.outputs]
        self.run_pointers([a.ctypes.data for a in ins], [o.ctypes.data for o in outs])
        return outs[0] if len(outs) == 1 else outs
