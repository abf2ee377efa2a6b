"""PassContext: everything a graph pass reads besides the graph — the target and the build's choices.

Every pass is `pass(graph, ctx) -> graph`; a pass that applies only to some targets or options reads them here and
returns the graph unchanged elsewhere. The driver computes the choices (build options, probes of the target CPU)
once and hands them down in one PassContext."""
from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from typing import Callable

from ..target import Caps, Target


def _host() -> Target:
    return Target.parse("llvm")


def warn_now(warning: Warning) -> None:
    """A pass's warning to the user (a build without a driver recording it: it is only shown)."""
    warnings.warn(warning, stacklevel=3)


def default_knob(signature: str, name: str, default, choices=(), doc: str = "", node=None):
    """A graph-level knob at its default (a build without tuned configs)."""
    return default


@dataclass(frozen=True)
class PassContext:
    """target: the filled Target (its Caps: lanes, registers, scatter, channel_block; target.is_cpu).
    precision: "fp32" or "bf16" (use_bf16 and use_bf16_blocked run only for "bf16"), with
    bf16_everywhere: bf16 on every conv/matmul over weights (False: only on those that stream their weight) and
    bf16_direct: its direct convs run at twice the float32 rate (Winograd keeps only the layers where it still wins).
    bf16_exact(): for a conv/matmul whose operands are exactly bfloat16 values (a bfloat16 graph's: autocast's casts,
    a .bfloat16() model's weights) on a CPU with AVX-512 BF16, in any precision: True, every such op over weights
    takes the bf16 dot products; False, only those that stream their weight (use_bf16). A function: the answer is
    measured (backends/llvm/probe.py), and only a graph with such ops asks.
    bf16_exact_direct(): besides, such a direct conv runs at about twice the float32 rate (bf16_direct's measure):
    use_winograd then routes those 3x3 convs as precision="bf16" does, without its bf16 Winograd form (not exact).
    weights_vary: the weights change on every call (a training step's graphs; use_winograd).
    winograd ("auto", "off", "all") and blocked_layout (bool): the build options of those names.
    fuse: the build option fuse (False: every node a group of its own).
    quantized: the build option quantized ("int8": quantised chains become integer ops, passes/quantize.py;
    "float": they compute in float32).
    libraries: the target's external codegens (-libs=; fxc.backends.external.Library); offload ("auto": a match is
    offloaded where cost, (library, nodes, weight ids) -> (library s, fxc s), measured it faster; "always") (docs/
    byoc.md).
    debug: the FXC_DEBUG level (1: a timeline line per step, 2: the graph after each pass); log: where those go;
    dump: (file name, text) of the graph after each pass, for FXC_DEBUG_DIR's folder (None: none kept).
    knob(signature, name, default, choices, doc, node): a graph-level schedule knob of one node (its signature says
    what the node computes), e.g. use_winograd's tile per conv: the tuned config's value, else the default (the
    driver's lookup in the tuning log, fxc/driver/tuned.py; a tuner's records what the passes declare).
    warn(warning): how a pass tells the user something about their model (e.g. passes/quantize.py's
    QuantizationWarning): the driver shows it and keeps it with the module, so a module from the cache shows it
    again (fxc/driver/cache.py)."""
    target: Target = field(default_factory=_host)
    precision: str = "fp32"
    bf16_everywhere: bool = True
    bf16_direct: bool = False
    bf16_exact: Callable[[], bool] = lambda: True
    bf16_exact_direct: Callable[[], bool] = lambda: False
    weights_vary: bool = False
    winograd: str = "auto"
    blocked_layout: bool = True
    fuse: bool = True
    quantized: str = "int8"
    libraries: tuple = ()
    offload: str = "auto"
    cost: Callable | None = None
    debug: int = 0
    log: Callable[[str], None] = print
    dump: Callable[[str, str], None] | None = None
    knob: Callable = default_knob
    warn: Callable[[Warning], None] = warn_now

    @property
    def caps(self) -> Caps:
        return self.target.caps
