"""The CPU module: a compiled shared library (kernels + execution plan) + constants, callable on numpy arrays or raw
pointers. Framework-free (numpy and ctypes only); framework wrappers live in fxc.capture.

Its weights (`prepack_inputs`: the inputs its packing launches read) are packed into the workspace by `fxc_prepack`
and the packing is reused while they stay unchanged (runtime/weights.py decides: the caller's token, the weights'
fingerprint); up to PREPACKED_SETS weight sets stay packed at once, one workspace each."""
from __future__ import annotations

import os
from collections import OrderedDict
from dataclasses import dataclass, field

import numpy as np

from ...errors import InputError, TargetError, check_return_code
from ..tensors import check_inputs, nbytes, np_dtype
from ..weights import Weights, token_of
from .library import CpuLibrary, Workspace, aligned_array, elf_arch, openmp_mode, pointer_array, process_arch

PREPACKED_SETS = 4         # weight sets a module keeps packed at once, a workspace each (_workspace_for)


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
    prepack_inputs: list = field(default_factory=list)   # the weights: inputs the packing step reads (weights.py)
    plan: list = field(default_factory=list)    # execution plan: (kernel, [(slot kind, index or byte offset)])
    kernel_flops: list = field(default_factory=list)   # per kernel (same order as `kernels`); 0 when unknown
    profiled: bool = False              # built with per-kernel timers (profile=True / FXC_PROFILE=1)
    target_spec: str = ""               # the full target string ("llvm -mcpu=haswell"); "" for `target`
    unrunnable: str = ""                # why this host cannot run the kernels (built for a CPU it is not), or ""
    offload: list = field(default_factory=list)     # the -libs= regions and every op's reason (docs/byoc.md)
    warned: list = field(default_factory=list)      # [warning class name, message] the build showed the user
    symbols = ()                        # size symbols: a DynamicModule's (runtime/cpu/dynamic.py)

    def __post_init__(self):
        arch = elf_arch(self.library)
        self._lib = CpuLibrary(self.library) if arch == process_arch() else None     # (else cross-compiled)
        if self._lib is None and not self.unrunnable:
            self.unrunnable = f"{arch} code: fxc.export it (docs/arm.md)"
        self.consts = [aligned_array(c) for c in self.consts]
        self._const_ptrs = pointer_array([c.ctypes.data for c in self.consts])
        self._ws = Workspace(self.workspace_bytes)
        self._sets = OrderedDict()      # the weights' addresses -> the workspace holding them packed
        self.weights = Weights(self.prepack_inputs, [nbytes(self.inputs[i]) for i in self.prepack_inputs],
                               self._lib and self._lib.fingerprint)
        self._samples = None            # each run's kernel times (a profiled module: profile.RunSamples)
        if self.profiled and self._lib is not None:
            from . import profile as kernel_profile  # deferred: profiled modules only (the load's size budget)
            c = kernel_profile.counters(self._lib.lib, len(self.kernels))
            self._samples = kernel_profile.RunSamples(c) if c is not None else None
        if self.profiled and os.environ.get("FXC_PROFILE", "0") not in ("", "0"):
            self.print_profile_at_exit()

    def profile(self, reset: bool = False) -> list:
        """Per-kernel times since the last reset: one dict per kernel (kernel, group, calls, total_ms, mean_us,
        median_us, min_us, share, gflops). Needs a module built with profile=True (or FXC_PROFILE=1)."""
        from . import profile as kernel_profile  # deferred: profiled modules only (the load's size budget)
        if self._lib is None:
            raise TargetError(self.unrunnable)
        c = kernel_profile.counters(self._lib.lib, len(self.kernels)) if self.profiled else None
        if c is None:
            raise InputError("this module has no kernel timers; build it with profile=True "
                             "(torch.compile(..., options={'profile': True})) or FXC_PROFILE=1")
        rows = kernel_profile.profile_rows(self.kernels, self.kernel_flops, c, self._samples)
        if reset:
            c[:] = 0
            self._samples.reset()
        return rows

    def print_profile_at_exit(self) -> None:
        """Print `profile_table()` to stderr when the process ends (done for every module under FXC_PROFILE=1)."""
        if self.profiled and self._lib is not None:
            from . import profile as kernel_profile  # deferred: profiled modules only
            kernel_profile.print_at_exit(self._lib.lib, self.kernels, self.kernel_flops, self._samples)

    def profile_table(self, top: int | None = None, reset: bool = False) -> str:
        """`profile()` as a text table, slowest kernel first."""
        from . import profile as kernel_profile  # deferred: profiled modules only
        runs = self._samples.per_run_ms() if self._samples is not None else None
        return kernel_profile.format_profile(self.profile(reset), top, runs)

    def use_openmp(self) -> None:
        """Run the parallel loops on OpenMP's team (PyTorch's, beside PyTorch) from now on, unless FXC_OPENMP=0:
        for a training step's graphs, whose calls follow PyTorch's own ops (runtime/cpu.py, openmp_mode)."""
        if self._lib is not None and self._lib.use_openmp is not None:
            self._lib.use_openmp(openmp_mode(training_step=True))

    def wake(self) -> None:
        """Wake the runtime's sleeping worker threads ahead of a call, so they are spinning by its first kernel:
        callers do this before preparing the inputs (the wake-up then overlaps that work)."""
        if self._lib is not None and self._lib.wake is not None:
            self._lib.wake()

    def run_pointers(self, in_ptrs: list, out_ptrs: list, prepack_token=None, sizes=None) -> None:
        """Run on raw addresses of contiguous buffers of the declared shapes/dtypes (no checks).

        prepack_token: (objects, versions), two tuples naming the current contents of the inputs in
        `prepack_inputs` (e.g. each weight tensor and its version counter). When it matches the previous
        call's (same objects, same versions, same addresses), the packed weights in the workspace are
        reused; None always repacks."""
        token = token_of((in_ptrs[i] for i in self.prepack_inputs), prepack_token)
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
        this thread is taken as unchanged without comparing it, and the packing is redone when the weights'
        fingerprint differs from the last packing's (runtime/weights.py: HeldWeights.holds)."""
        if self.unrunnable:
            raise TargetError(self.unrunnable)
        packs = self.prepack_inputs and self._lib.prepack is not None
        ws = self._workspace_for(token) if packs else self._ws
        args = (in_array, pointer_array(out_ptrs), self._const_ptrs, self._workspace(sizes, ws))
        if not packs:
            check_return_code(self._lib.run(*args), self._lib.index_error)
            if self._samples is not None:
                self._samples.take()
            return
        held = ws.held()
        fingerprint = self.weights.fingerprint(in_array)
        if not held.holds(token, fingerprint):
            held.drop()
            check_return_code(self._lib.prepack(*args), self._lib.index_error)
            held.hold(token, fingerprint)
        check_return_code(self._lib.run_main(*args), self._lib.index_error)
        if self._samples is not None:
            self._samples.take()

    def check_inputs(self, arrays) -> list:
        return check_inputs(self.inputs, arrays)

    def __call__(self, *arrays):
        """numpy in, numpy out (a list when the module has several outputs)."""
        self.wake()
        ins = self.check_inputs(arrays)
        outs = [np.empty(s.shape, np_dtype(s.dtype)) for s in self.outputs]
        self.run_pointers([a.ctypes.data for a in ins], [o.ctypes.data for o in outs])
        return outs[0] if len(outs) == 1 else outs
