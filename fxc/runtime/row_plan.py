"""A device module's launch plan at one value of its size symbol (numpy only; fxc/driver/rows.py builds the plan).

A symbolic device plan holds Launch steps whose `repeat` is (group, rows per launch, part[, tail rows u[, m,
last]]) and whose `rows` gives each argument's bytes per row: the steps of one group and part run as a unit, part
0 once per block of `rows` rows (s // rows times), a later part over the rows s - s % m .. s that the parts before
it left (m: the rows of the part before; `rows` when absent): the last part once per u of them (the last launch
perhaps past s; u 1 when absent: once per row), any other once, when s % m >= u (binary tails: m = 2u), every
argument's offset moved to the launch's first row. A workspace
argument may be ("work", (base, per)): the byte offset base + s * per (the workspace's symbolic region).
`expand(plan, s)` lists the launches of a call at size s as (step, offsets).
"""
from __future__ import annotations

import numpy as np

from .symbols import dim_value
from .tensors import np_dtype


def slot_offset(ix, s: int) -> int:
    """A slot's byte offset at size s: an int, or (base, per) for base + s * per."""
    return ix if isinstance(ix, int) else int(ix[0]) + s * int(ix[1])


def _units(plan: list) -> list:
    """The plan as [(repeat or None, [steps])], consecutive steps with one repeat key together."""
    units: list = []
    for st in plan:
        key = tuple(st.repeat) or None
        if key is not None and units and units[-1][0] == key:
            units[-1][1].append(st)
        else:
            units.append((key, [st]))
    return units


def expand(plan: list, s: int | None) -> list:
    """[(step, [byte offset of each argument])] of the launches at size s (None: a static plan), in order."""
    out = []
    for key, steps in _units(plan):
        if key is None:
            out += [(st, [0 if kind != "work" else slot_offset(ix, s or 0) for kind, ix in st.args]) for st in steps]
            continue
        rows, part = key[1], key[2]
        unit = key[3] if len(key) > 3 else 1
        m, last = (key[4], key[5]) if len(key) > 5 else (rows, 1)
        first = s - s % m           # the first row the parts before this one left
        if part == 0:
            starts = range(0, s // rows * rows, rows)
        elif last:
            starts = range(first, s, unit)
        else:
            starts = range(first, first + unit, unit) if s % m >= unit else ()
        for r in starts:
            for st in steps:
                out.append((st, [(0 if kind != "work" else slot_offset(ix, s)) + r * per
                                 for (kind, ix), per in zip(st.args, st.rows)]))
    return out


def symbolic_dims(spec) -> bool:
    return any(not isinstance(d, int) for d in spec.shape)


def shape_at(spec, sizes: dict) -> tuple:
    """A TensorSpec's shape at the call's symbol values."""
    return tuple(dim_value(d, sizes) for d in spec.shape)


def nbytes_at(spec, sizes: dict | None) -> int:
    """A TensorSpec's bytes at the symbols' values (its static shape's when sizes is None)."""
    shape = shape_at(spec, sizes) if sizes else spec.shape
    return int(np.prod(shape, dtype=np.int64)) * np_dtype(spec.dtype).itemsize
