"""Bring-your-own-codegen: vendor libraries that run regions of a graph on a target's own device (docs/byoc.md).

A `Library` is an external codegen: the target kinds it serves, its pattern table, how a matched region becomes a
step of the target's plan, and what its runtime needs installed. A target names its libraries TVM-style
("opencl -libs=clblast"; `Target.libs`); `libraries_of(target)` gives their entries (a TargetError for a name
fxc does not know or a kind the library does not serve). The partition step (fxc/relay_like/passes/partition.py)
matches the patterns over the graph IR, asks each pattern's check (dtypes, layouts, shapes, attributes, the
target's Caps) and the build's cost choice, and records the regions and the reason for every op; the driver lowers
each offloaded match with `Library.lower` into a plan step that the target's runtime module runs on its own
buffers (fxc/runtime/opencl/module.py for CLBlast).

One folder per library: clblast/ (GEMM on OpenCL), clml/ (Qualcomm's CLML on Adreno: whole regions, fxc's kernels
kept as their fallback), dnnl/ (oneDNN convolutions, matmuls, LSTM / GRU layers on llvm, run by the CPU module's
plan: fxc/runtime/cpu/dnnl_shim.c).
"""
from __future__ import annotations

from ...errors import TargetError
from ...target import host_triple, triple_arch
from .clblast import LIBRARY as CLBLAST
from .clml import LIBRARY as CLML
from .dnnl import LIBRARY as DNNL
from .library import Library, Pattern

LIBRARIES = {lib.name: lib for lib in (CLBLAST, CLML, DNNL)}      # one entry per library folder
__all__ = ["LIBRARIES", "Library", "Pattern", "libraries_of"]


def libraries_of(target) -> tuple:
    """The Library entries the target names with -libs= (its runtime installed), in the order named; TargetError
    for an unknown name, a kind the library does not serve, or a library not installed here."""
    known, out = LIBRARIES, []
    for name in target.libs:
        lib = known.get(name)
        if lib is None:
            raise TargetError(f"target {target}: unknown library -libs={name}; known: {', '.join(known)} "
                              f"(docs/byoc.md)")
        if target.kind not in lib.kinds:
            raise TargetError(f"target {target}: {name} runs on {', '.join(lib.kinds)} targets, not {target.kind}")
        if target.kind == "llvm" and triple_arch(target.triple) != triple_arch(host_triple()):
            raise TargetError(f"target {target}: -libs={name} links the {name} library installed on this "
                              f"{triple_arch(host_triple())} machine, which code for {triple_arch(target.triple)} "
                              f"cannot call; drop -libs={name} to cross-compile (fxc's own kernels)")
        lib.check_installed()
        out.append(lib)
    return tuple(out)

