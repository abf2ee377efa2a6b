"""The loop IR of max_pool2d (fxc/ops/nn.py), the CPU's kernel of it: one output row per parallel step."""
from __future__ import annotations

import math

from ...symbolic.expr import Var, as_expr, binary, compare, maximum, minimum, select
from ..loop_ir import For, Store, seq


def max_pool2d_loops(x_shape, out_shape, kernel, stride, padding, dilation, lo):
    """lower(outs, ins) of max_pool2d over x [.., H, W] into out [.., OH, OW] (lo: the dtype's least value). One
    output row per parallel step: the columns whose windows stay inside the input row range are one vector loop
    (strided loads, no bounds checks); the few border columns check every tap."""
    (KH, KW), (sh, sw), (ph, pw), (dh, dw) = kernel, stride, padding, dilation
    H, W = x_shape[-2:]
    OH, OW = out_shape[-2:]
    planes = math.prod(x_shape[:-2])
    offs = [kw * dw - pw for kw in range(KW)]
    first = max(-(off // sw) for off in offs)                     # columns [first, last]: every tap in the row
    last = min(OW - 1, min((W - 1 - off) // sw for off in offs))

    def lower(outs, ins):
        out, xb = outs[0], ins[0]
        p, j = Var("p"), Var("j")
        plane, oh = binary("idiv", p, OH), binary("imod", p, OH)
        rows = [(oh * sh - ph + kh * dh) for kh in range(KH)]
        inside = [binary("and", compare("ge", h, as_expr(0)), compare("lt", h, as_expr(H))) for h in rows]
        base = [plane * (H * W) + minimum(maximum(h, as_expr(0)), as_expr(H - 1)) * W for h in rows]

        def window(ow, checked):
            v = lo
            for kh in range(KH):
                for off in offs:
                    w = ow * sw + off
                    ok = inside[kh]
                    if checked:
                        ok = binary("and", ok,
                                    binary("and", compare("ge", w, as_expr(0)), compare("lt", w, as_expr(W))))
                        w = minimum(maximum(w, as_expr(0)), as_expr(W - 1))
                    v = maximum(v, select(ok, xb[base[kh] + w], lo))
            return v
        row = p * OW
        stmts = []
        n, vec = last - first + 1, 16       # columns a chunk ("vectorize" loops take the target's vector width)
        if n > 0:       # whole vectors, then one last vector overlapping them (stores are idempotent) for the rest
            for start, count in ((first, n if n < vec else n // vec * vec),
                                 (last + 1 - vec, vec if n > vec and n % vec else 0)):
                if count:
                    stmts.append(For(j, count, Store(out, row + start + j, window(j + start, False)), "vectorize"))
        for start, count in ((0, min(first, OW)), (max(last + 1, first, 0), OW - max(last + 1, first, 0))):
            if count > 0:
                stmts.append(For(j, count, Store(out, row + start + j, window(j + start, True))))
        work = planes * OH * OW * KH * KW
        return For(p, planes * OH, seq(*stmts), "parallel" if work >= 1 << 15 and planes * OH > 1 else "serial")
    return lower
