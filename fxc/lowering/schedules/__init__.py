"""Schedules per target family, in one registry keyed by (family, op kind).

Families: `cpu` (explicit vector loop IR over the target's Caps.lanes and register tiles: cpu/) and `gpu` (device
launches: gpu/). Each family package holds a table `SCHEDULES` (kind -> schedule function) and `RULES` (name -> a
layout rule of its schedules that the graph passes ask, e.g. how many accumulator vectors a register tile holds);
`FAMILIES` names each family's default kind, the schedule of a kind that has none of its own.

    lookup("cpu", "conv2d_packed")   # the CPU family's conv2d_packed schedule
    lookup("cpu")                    # its default: schedule_root (injective and reduction roots, which dispatch
                                     # a reduction to the schedule of its compute's kind)
    lookup("gpu", "gemm")            # the GPU family's tiled GEMM (gpu/__init__.root_kind names a root's kind)
    rule("cpu", "acc_vectors")(caps)
    family_of(target)                # "cpu" for llvm targets, "gpu" for device targets

Kinds: cpu: "root" (default), and the `schedule` attr of a reduction's compute ("conv2d_packed",
"matmul_packed", "depthwise_conv2d", "depthwise_blocked", "conv2d_winograd"); gpu: "compute" (default), "reduce",
"gemm", "gemv", "window", "extern". A family is imported when first asked for.
"""
from __future__ import annotations

import functools
import importlib

from ...errors import TargetError

FAMILIES = {"cpu": "root", "gpu": "compute"}        # family -> its default kind


@functools.lru_cache(maxsize=None)
def _family(family: str):
    if family not in FAMILIES:
        raise TargetError(f"no schedules for target family {family!r}; known families: {', '.join(FAMILIES)}")
    return importlib.import_module(f"{__name__}.{family}")


def lookup(family: str, kind: str | None = None, default: bool = True):
    """The schedule of op kind `kind` in `family`; a kind without one (or None) gets the family's default, or None
    when default=False."""
    table = _family(family).SCHEDULES
    fn = table.get(kind) if kind is not None else None
    return fn if fn is not None or not default else table[FAMILIES[family]]


def rule(family: str, name: str):
    """The family's layout rule `name` (see the family's RULES), for graph passes that shape data for its
    schedules: they ask here rather than import a schedule module."""
    rules = getattr(_family(family), "RULES", {})
    if name not in rules:
        raise TargetError(f"target family {family!r} has no schedule rule {name!r}; it has: {', '.join(rules)}")
    return rules[name]


def family_of(target) -> str:
    """The schedule family of a fxc.target.Target: "cpu" for llvm targets, "gpu" for every device target."""
    return "cpu" if target.is_cpu else "gpu"
