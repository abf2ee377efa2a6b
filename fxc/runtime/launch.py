"""The launch records of a device module's plan (numpy-free, no device library): one `Launch` per kernel launch,
and `dispatch_of`, the work-groups per axis a launch's grid becomes where a device API bounds them (GL, WebGPU).

The driver (fxc/driver/lower_gpu.py, rows.py) writes the plan; the device modules (runtime/opencl/module.py,
opengl/module.py, browser/*) run it; artifacts store it (runtime/artifact/device.py reads it back);
runtime/row_plan.py expands a symbolic plan at one size.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from ..errors import TargetError

MAX_GROUPS = 65535          # work-groups per dispatch axis that GL 4.3 (and WebGPU) guarantee


@dataclass
class Launch:
    kernel: str
    args: list                  # [(slot kind: in | out | const | work | null, index or byte offset)]
    grid: tuple
    block: tuple
    prepack: bool = False       # part of the prepack step (reads weights only): rerun only when a weight changed
    rows: tuple = ()            # symbolic plans: each argument's bytes per row (runtime/row_plan.py)
    repeat: tuple = ()          # symbolic plans: (group, rows per launch, part 0 blocks | 1 remaining rows[, rows
    #                             per launch of part 1: 1, or 2 / 4 where offsets must be whole texels (webgl)])
    call: tuple = field(default=(), repr=False)     # an external library's step (kernel "library:routine",
    #                             fxc.backends.external): its call's parameters (ints; the module's kernel line shows
    #                             them), its args the operands it reads and writes


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
