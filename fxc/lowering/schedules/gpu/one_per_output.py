"""The generic GPU schedule: one work-item per output element of any compute (a reduction is computed by the
work-item of its output, in a private accumulator). Work-groups of `knobs.work_group_size` work-items along
one grid axis; the last group's surplus work-items do nothing."""
from __future__ import annotations

import math

from ....symbolic.expr import Var, as_expr, compare
from ...loop_ir import For, IfThen, LetStmt, Store, seq
from ...lower import Converter


class DeviceConverter(Converter):
    """The lowering's Converter without the CPU's vector accumulators (a device vectorises across work-items)."""

    def _vector_reduction(self, red, rvars, val, acc, slot):
        return None


def unflatten(i, shape) -> list:
    """The indices of flat position i in a row-major tensor of `shape`."""
    idx, rest = [], i
    for k, n in enumerate(reversed(shape)):
        last = k == len(shape) - 1
        idx.append(rest if last else rest % n)
        rest = rest // n
    return list(reversed(idx))


def grid_1d(n: int, block: int, body_of):
    """for g (grid), th (thread): let i = g * block + th; if i < n: body_of(i)."""
    block = max(1, min(block, n))
    g, th, i = Var("g"), Var("th"), Var("i")
    groups = math.ceil(n / block)
    inner = body_of(i)
    if groups * block != n:
        inner = IfThen(compare("lt", i, as_expr(n)), inner)
    return For(g, groups, For(th, block, LetStmt(i, g * block + th, inner), "thread"), "grid")


def one_per_output(conv: Converter, t, out, knobs) -> list:
    n = math.prod(t.shape)
    if n == 0:
        return []

    def body(i):
        pre: list = []
        value = conv.convert(t[tuple(unflatten(i, t.shape))] if t.shape else t[()], pre)
        return seq(*pre, Store(out, i, value))
    return [grid_1d(n, knobs.work_group_size, body)]
