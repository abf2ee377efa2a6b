"""Build options: their names, their checks, and what they decide for the graph passes (one place for all).

Takes the options of `build(graph, target, **options)` (and of the frontends, which check their users' options
against BUILD_OPTIONS, torch.compile's against OPTION_NAMES); produces checked values, FxcError / TargetError
naming an unknown one, and the PassContext they make for the graph passes and plan steps (`pass_context`).

    debug           level (or FXC_DEBUG): 1 a timeline, 2 the graph after each pass, 3 the loop IR, 4 the code
    fuse            fusion of ops into groups (default True)
    profile         time every kernel call (or FXC_PROFILE=1); `Module.profile()` returns the table
    precision       "fp32" (default) or "bf16" (CPUs with AVX-512 BF16; bf16 chooses where)
    winograd        "auto", "off", "all";  blocked_layout: True / False (CPU layout passes, measurable apart)
    weights_vary    the weight inputs change on every call (a training step): their transforms are redone
    tuning_log      the tuning log whose best configs the build applies (a path; False: none; default: the log
                    beside the compile cache, when it exists; fxc.tune writes it: docs/tuning.md)
    mode            torch.compile's option: "max-autotune" answers with an FxcError pointing at fxc.tune (fxc tunes
                    ahead of time, once; its log then applies to every compile)
    quantized       "int8" (default): a quantised model's dequantize -> conv/matmul -> quantize chains compute as
                    integer ops; "float": in float32 as the dequantize defines them (docs/int8.md)
    offload         with a target's -libs=: "auto" (default: a match runs in the library where measured faster)
                    or "always" (every match the patterns accept; for tests) (docs/byoc.md)
"""
from __future__ import annotations

import functools
import os
import sys

from ..backends import backend_of, libraries_of
from ..errors import FxcError, TargetError
from ..relay_like.context import PassContext
from ..relay_like.pipeline import PRECISIONS
from ..target import Target

WINOGRAD = ("auto", "off", "all")
BF16 = ("auto", "all", "weight_bound")
# the options build() takes besides target (the frontends check their users' options against these)
BUILD_OPTIONS = frozenset({"debug", "fuse", "profile", "precision", "winograd", "blocked_layout", "bf16",
                           "tuning_log", "offload", "quantized"})
QUANTIZED = ("int8", "float")
OFFLOAD = ("auto", "always")
# torch.compile's options: every build option and the capture's own
OPTION_NAMES = BUILD_OPTIONS | {"target", "freeze", "check", "specialize", "mode"}
# accepted but not offered to users: switches of one CPU layout pass, for measuring it against its absence
INTERNAL_OPTIONS = frozenset({"winograd", "blocked_layout"})
FLAGS = ("fuse", "profile", "freeze", "check", "weights_vary")     # options that are True or False
BF16_FAST_GAIN = 1.5    # vdpbf16ps multiply-adds per FMA's from which a bf16 direct conv outruns float32 Winograd


def debug_level(options: dict) -> int:
    return int(options.get("debug", 0) or os.environ.get("FXC_DEBUG", "0") or 0)


def profiled(options: dict) -> bool:
    """Whether every kernel call is timed: the profile option, or FXC_PROFILE=1."""
    return bool(options.get("profile") or os.environ.get("FXC_PROFILE", "0") not in ("", "0"))


def log(msg):
    """The driver's debug output (stderr)."""
    print(msg, file=sys.stderr)


def layout_choices(options: dict) -> dict:
    """The build options that switch a CPU layout pass, for measuring one choice against its absence:
    winograd ("auto": where it pays, the default; "off": direct convs only; "all": every eligible conv) and
    blocked_layout (True, the default; False: NCHW everywhere). An unknown value is an FxcError naming the valid."""
    winograd, blocked = options.get("winograd", "auto"), options.get("blocked_layout", True)
    if winograd not in WINOGRAD:
        raise FxcError(f"unknown winograd={winograd!r}; valid: {', '.join(map(repr, WINOGRAD))}")
    if not isinstance(blocked, bool):
        raise FxcError(f"blocked_layout={blocked!r}: give True or False")
    return dict(winograd=winograd, blocked_layout=blocked)


def bf16_mode(options: dict) -> str:
    """The bf16 build option (used with precision="bf16"): "auto" (the default: bf16 everywhere where this CPU's
    vdpbf16ps beats its FMAs, else only on weight-streaming ops), "all" or "weight_bound". An unknown value is an
    FxcError naming the valid ones."""
    mode = options.get("bf16", "auto")
    if mode not in BF16:
        raise FxcError(f"unknown bf16={mode!r}; valid: {', '.join(map(repr, BF16))} (with precision='bf16')")
    return mode


def check_options(options: dict, known=BUILD_OPTIONS, extra=()) -> None:
    """An FxcError for an option not in `known` (listing the options users are offered: not INTERNAL_OPTIONS; and
    `extra`, a frontend's own) or a value of the wrong kind (check_build_options)."""
    unknown = set(options) - set(known) - set(extra)
    if unknown:
        listed = sorted((set(known) | set(extra)) - INTERNAL_OPTIONS)
        raise FxcError(f"unknown fxc option(s) {sorted(unknown)}; known: {listed}")
    check_build_options(options)


def check_build_options(options: dict) -> None:
    """Every build option's value checked up front (torch.compile's backend, before Dynamo traces anything): an
    FxcError naming the option and its valid values."""
    for name in FLAGS:
        if name in options and not isinstance(options[name], bool):
            raise FxcError(f"{name}={options[name]!r}: give True or False")
    layout_choices(options)
    bf16_mode(options)
    if options.get("mode") is not None:
        raise FxcError(f"mode={options['mode']!r}: fxc tunes ahead of time rather than per compile. Run "
                       f"fxc.tune(model, example_inputs, target=..., trials=...) (or `fxc tune` on the command line) "
                       f"once; every later compile for that target applies its log (the tuning_log= option, default "
                       f"the log beside the compile cache): docs/tuning.md")
    offload_mode(options)
    quantized_mode(options)


def quantized_mode(options: dict) -> str:
    """The quantized build option: "int8" (the default) or "float"; an FxcError names the valid ones."""
    mode = options.get("quantized", "int8")
    if mode not in QUANTIZED:
        raise FxcError(f"unknown quantized={mode!r}; valid: {', '.join(map(repr, QUANTIZED))}")
    return mode


def offload_mode(options: dict) -> str:
    """The offload build option: "auto" (the default) or "always"; an FxcError names the valid ones."""
    mode = options.get("offload", "auto")
    if mode not in OFFLOAD:
        raise FxcError(f"unknown offload={mode!r}; valid: {', '.join(map(repr, OFFLOAD))} (with a target's -libs=)")
    return mode


def check_precision(precision: str, target: "str | Target | None" = None, family: str = "cpu"):
    """A known precision the target can run. A device target (family "gpu") computes in float32 only; a CPU's bf16
    needs AVX-512 BF16 (vdpbf16ps): without it bf16 is a TargetError rather than emulated, as two FMAs per bf16
    pair plus the unpacking do no fewer multiply-adds than float32 and round more."""
    target = Target.parse(target)
    if family != "cpu" and precision != "fp32":
        raise TargetError(f"precision={precision!r} is a CPU mode (AVX-512 BF16); the {target.kind} "
                          f"target computes in float32: use precision='fp32'")
    if precision not in PRECISIONS:
        raise TargetError(f"unknown precision {precision!r}; valid: {', '.join(map(repr, PRECISIONS))}")
    if precision == "bf16" and not target.caps.bf16_dot:
        raise TargetError(f"precision='bf16' needs a CPU with AVX-512 BF16 (vdpbf16ps); target '{target}' "
                          f"({target.mcpu}) lacks it: use precision='fp32', or a target such as "
                          f"'llvm -mcpu=sapphirerapids' for a CPU that has it")


def bf16_everywhere(target: "Target | None" = None, mode: str = "auto") -> bool:
    """With precision="bf16": bf16 on every conv/matmul over weights where vdpbf16ps beats FMAs per multiply-add on
    the target CPU (measured once on this host when it runs the target, backends/llvm/probe.py; a CPU it cannot run
    counts as not faster), or with the build option bf16="all"; else (and with bf16="weight_bound") only on those
    that stream their weight."""
    return mode == "all" or (mode != "weight_bound" and _bf16_gain(target) >= 1.0)


def bf16_direct_fast(target: "Target | None" = None) -> bool:
    """A bf16 direct conv runs at about twice the float32 rate on the target (measured, backends/llvm/probe.py):
    where bf16 is used everywhere, Winograd (float32) then keeps only the large maps where it still wins
    (passes/use_winograd.py)."""
    return _bf16_gain(target) >= BF16_FAST_GAIN


def _bf16_gain(target: "Target | None") -> float:
    target = Target.parse(target)
    if target.mcpu != Target.parse("llvm").mcpu or not target.caps.bf16_dot:
        return 0.0      # measured only for this host's own CPU
    return backend_of(target).bf16_gain()


def pass_context(target: Target, options: dict, debug: int = 0, cost=None, knob=None, warn=None) -> PassContext:
    """What the graph passes and plan steps read (fxc.relay_like.pipeline): the target and the choices these
    options make for it (the bf16 decisions measured on this host, that of a bfloat16 graph's ops only when a
    graph has them: PassContext.bf16_exact), made in this one place; cost: the offload
    measurement (fxc/driver/offload.py) for a target with -libs=; knob: the graph-level knobs' lookup
    (fxc/driver/tuned.py graph_knob; None: every knob at its default); warn: how the passes' warnings reach the
    user (None: shown, PassContext's default)."""
    precision, mode = options.get("precision", "fp32"), bf16_mode(options)
    everywhere = precision == "bf16" and bf16_everywhere(target, mode)
    return PassContext(target, precision, everywhere, everywhere and bf16_direct_fast(target),
                       functools.cache(lambda: bf16_everywhere(target, mode)),
                       functools.cache(lambda: bf16_everywhere(target, mode) and bf16_direct_fast(target)),
                       bool(options.get("weights_vary")), **layout_choices(options), fuse=options.get("fuse", True),
                       quantized=quantized_mode(options),
                       libraries=libraries_of(target), offload=offload_mode(options), cost=cost, debug=debug, log=log,
                       dump=debug.note if getattr(debug, "folder", None) else None,
                       **({"knob": knob} if knob is not None else {}), **({"warn": warn} if warn is not None else {}))
