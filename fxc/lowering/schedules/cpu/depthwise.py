"""Depthwise conv2d schedules (explicit vector loop IR), NCHW and NCHW16c.

- depthwise conv2d in NCHW (groups == channels): lanes = output columns; parallel over (batch, channel, output
  row); a fused zero pad is read through, small maps copy a channel's padded window into a local plane.
- depthwise_blocked (NCHW16c, use_blocked_layout): lanes = the 16 channels of a block, one vector FMA per tap.

The NCHW schedule also runs ops/int8_depthwise.py's integer depthwise conv where its own schedule (depthwise_i8.py)
does not apply: its uint8 / int8 input and int8 weight are read as bytes and widened in registers (`_tap`:
float32(int32(v) - x_zp), exact), the sum as the float one.
"""
from __future__ import annotations

from ....symbolic.expr import (
    Bin,
    Broadcast,
    Const,
    Expr,
    Fma,
    Lane,
    Load,
    Var,
    VecLoad,
    as_expr,
    binary,
    cast,
    substitute,
    vec,
)
from ...loop_ir import Allocate, Buffer, For, IfThen, LetStmt, Store, seq
from ...lower import Converter, flat_index
from ...vectorize import linear_stride_is_one, vectorize_expr
from .default import parallel_over
from .gemm import store_vector

MAX_BORDER_COLUMNS = 16     # output columns whose taps leave the input run as scalars; more: generic schedule


def _unpadded(x):
    """(tensor read, top pad, left pad): a fused zero pad of H/W (pad's compute attrs) is read through."""
    pa = x.attrs if x.body is not None else {}
    w = pa.get("pad_widths")
    if pa.get("pad_of") is None or pa.get("pad_value") != 0 or w is None or min(min(p) for p in w) < 0 \
            or any(tuple(p) != (0, 0) for d, p in enumerate(w) if d not in (2, 3)):
        return x, 0, 0
    return pa["pad_of"], w[2][0], w[3][0]


def _widen(e: Expr, zp: int) -> Expr:
    """An 8-bit value e as float32(int32(e) - zp): exact."""
    v = cast("int32", e)
    return cast("float32", v - Const(zp, "int32") if zp else v)


def _tap(conv: Converter, t, idx: tuple, zp: int = 0) -> Expr:
    """A read of t (the input or the weight) as the conv's float32 value: an 8-bit tensor (ops/int8_depthwise.py)
    widened, a float32 one as it is."""
    e = conv.convert(t[idx], None)
    return _widen(e, zp) if t.dtype in ("uint8", "int8") else e


def schedule_depthwise(conv: Converter, rt, out: Buffer, red, value: Expr, axes, shape, num_threads):
    """Depthwise conv2d, NCHW; lanes = output columns, parallel over (batch, channel, output row).

    A zero pad fused into the group is never materialized: a kernel row whose input row is outside the
    input is skipped by one branch; output columns whose taps all fall inside the input run as vectors
    (the target's Caps.lanes columns per accumulator), the few border columns as scalars that drop their outside
    taps."""
    VL = conv.caps.lanes
    a = rt.attrs
    x, w = a["x"], a["w"]
    sh, sw = a["stride"]
    dh, dw = a["dilation"]
    N, O, OH, OW = shape
    _, _, KH, KW = w.shape
    n, o, oh, ow = axes
    mult = O // x.shape[1]                      # output channels per input channel
    src, pt, pl = _unpadded(x)
    H, W = src.shape[2], src.shape[3]
    kh, kw, owv = Var("kh"), Var("kw"), Var("owv")
    c = binary("idiv", o, mult) if mult > 1 else o
    ih = oh * sh + kh * dh - pt
    rows_clip = pt > 0 or (OH - 1) * sh + (KH - 1) * dh - pt >= H
    row_ok = binary("and", Bin("ge", ih, as_expr(0)), Bin("lt", ih, as_expr(H)))
    unroll = conv.knob("depthwise.unroll_max", UNROLL_MAX, (1, 3, 5, 11), "the longest kernel row or column "
                       "whose loop is unrolled (the taps in registers when both are)")
    kh_kind = "unroll" if KH <= unroll else "serial"
    kw_kind = "unroll" if KW <= unroll else "serial"
    zx = a.get("x_zp", 0)                      # an 8-bit input's zero point (ops/int8_depthwise.py)
    wv = _tap(conv, w, (o, 0, kh, kw))
    wcopy = None
    if KH * KW <= 49 and kh_kind == kw_kind == "unroll":   # the channel's taps in registers for all its rows
        wl = conv.local(rt.dtype, KH * KW, "wtap")
        wcopy = seq(*[Store(wl, as_expr(i * KW + j), substitute(wv, {kh: as_expr(i), kw: as_expr(j)}))
                      for i in range(KH) for j in range(KW)])
        wv = Load(wl, kh * KW + kw)
    out_index = flat_index(axes, shape)

    def over_rows(taps):
        return For(kh, KH, IfThen(row_ok, taps) if rows_clip else taps, kh_kind)

    # columns [lo, hi) read only inside the input
    lo = min(-(-pl // sw), OW)
    hi = (W - 1 + pl - (KW - 1) * dw) // sw + 1 if W - 1 + pl - (KW - 1) * dw >= 0 else 0
    hi = max(lo, min(OW, hi))
    border = list(range(0, lo)) + list(range(hi, OW))
    xv = _tap(conv, src, (n, c, ih, ow * sw + kw * dw - pl), zx)
    PH, PW = (OH - 1) * sh + (KH - 1) * dh + 1, (OW - 1) * sw + (KW - 1) * dw + 1
    plane = None
    floats = (border or rows_clip) and sw == 1 and VL // 2 < OW and (OW <= VL or len(border) >= PLANE_BORDER) \
        and PH * PW <= PLANE_FLOATS
    widened = src.dtype in ("uint8", "int8") and PH * PW <= PLANE_WIDENED
    if (floats or widened) and wcopy is not None and conv.bufs.get(src) is not None:
        # small maps (one vector per row), or wide borders (5x5 and 7x7 kernels): the channel's padded window
        # copied once into a zeroed local plane, then every column is a vector column and no row is clipped
        # (border columns would cost as much as the interior). Measured: 1.2-1.5x at 14x14, 1.6-1.8x for 7x7
        # kernels at 56x56 and 28x28; at 7x7 maps and for stride 2 the copy costs more than it saves. An 8-bit
        # input always takes it: its bytes are widened once an element there, not once a tap
        # a widened plane holds its columns by phase (col % sw, then col // sw): a strided conv's taps contiguous
        phases = sw if widened else 1
        ps = -(-PW // phases)
        plane = conv.local(rt.dtype, PH * ps * phases, "plane")
        base = (n * src.shape[1] + c) * (H * W)
        plane_fill = _fill_widened(plane, conv.bufs[src], base, H, W, PH, PW, pt, pl, zx, phases) if widened else \
            _fill_plane(plane, conv.bufs[src], base, H, W, PH, PW, pt, pl, rt.dtype, VL)
        if phases == 1:
            xv = Load(plane, (oh * sh + kh * dh) * PW + ow * sw + kw * dw)
        else:
            xv = Load(plane, (oh * sh + kh * dh) * (ps * phases) + binary("imod", kw * dw, as_expr(phases)) * ps + ow
                      + binary("idiv", kw * dw, as_expr(phases)))
        rows_clip, lo, hi, border = False, 0, OW, []
    if len(border) > MAX_BORDER_COLUMNS:
        return None
    stmts = []
    full = (hi - lo) // VL
    for start, count, lanes in ((lo, full, VL), (lo + full * VL, 1, hi - lo - full * VL)):
        if count == 0 or lanes == 0:
            continue
        # kernel rows alternate between `parts` accumulators (summed at the end): that many FMA chains in flight
        # instead of one chain of KH*KW dependent FMAs per vector of columns
        parts = min(ACC_PARTS, KH) if lanes > 1 and kh_kind == "unroll" else 1
        acc = conv.local(rt.dtype, lanes * parts, "dacc")
        ow0 = as_expr(start) + owv * lanes
        xvec = vectorize_expr(xv, ow, lanes) if lanes > 1 else xv
        if xvec is None:
            return None
        xvec = substitute(xvec, {ow: ow0})
        vt = vec(rt.dtype, lanes) if lanes > 1 else rt.dtype
        wb = Broadcast(wv, lanes) if lanes > 1 else wv
        slot = binary("imod", kh, as_expr(parts)) * lanes if parts > 1 else as_expr(0)
        part = VecLoad(acc, slot, lanes) if lanes > 1 else Load(acc, slot)
        upd = Store(acc, slot, Fma(xvec, wb, part))
        accv = VecLoad(acc, as_expr(0), lanes) if lanes > 1 else Load(acc, as_expr(0))
        for q in range(1, parts):
            accv = binary("add", accv, VecLoad(acc, as_expr(q * lanes), lanes))
        body = seq(*[Store(acc, as_expr(q * lanes), Const(0.0, vt)) for q in range(parts)],
                   over_rows(For(kw, KW, upd, kw_kind)))
        body = seq(body, _store_columns(out, out_index, value, red.var, ow, ow0, lanes, accv))
        stmts.append(Allocate(acc, For(owv, count, body) if count > 1 else LetStmt(owv, as_expr(0), body)))
    for j in border:                            # scalar columns: taps outside the input are left out
        acc = conv.local(rt.dtype, 1, "bacc")
        accs = Load(acc, as_expr(0))
        taps = []
        for q in range(KW):
            iw = j * sw + q * dw - pl
            if 0 <= iw < W:
                xs = _tap(conv, src, (n, c, ih, as_expr(iw)), zx)
                taps.append(Store(acc, as_expr(0), Fma(xs, substitute(wv, {kw: as_expr(q)}), accs)))
        body = seq(Store(acc, as_expr(0), Const(0.0, rt.dtype)), over_rows(seq(*taps)) if taps else None,
                   Store(out, substitute(out_index, {ow: as_expr(j)}),
                         substitute(value, {ow: as_expr(j), red.var: accs})))
        stmts.append(Allocate(acc, body))
    work = N * O * OH * OW * KH * KW
    if wcopy is None:
        return parallel_over([(n, N), (o, O), (oh, OH)], seq(*stmts), work, num_threads)
    rows = For(oh, OH, seq(*stmts))
    # an 8-bit input's plane: the most rows (up to 8) that divide the map, so no row is left to the one-row path
    r0 = next((r for r in range(8, 3, -1) if OH % r == 0), ROW_BLOCK) if widened else ROW_BLOCK
    R = conv.knob("depthwise.row_block", r0, (2, 3, 6, 8), "output rows computed together over a channel's "
                  "plane (loads shared between rows)") if plane is not None and sh == sw == dh == dw == 1 else r0
    if plane is not None and sh == 1 and sw == 1 and dh == 1 and dw == 1 and OH >= R:
        blocks = OH // R
        ob, orest = Var("ob"), Var("orest")
        rows = seq(For(ob, blocks, _row_block(conv, rt, out, red, value, out_index, oh, ow, ob * R, plane,
                                              PW, wl, KH, KW, OW, R)),
                   For(orest, OH - blocks * R,
                       LetStmt(oh, orest + blocks * R, seq(*stmts))) if OH % R else None)
    channel = seq(wcopy, rows)
    if plane is not None:
        channel = Allocate(plane, seq(plane_fill, channel))
    return parallel_over([(n, N), (o, O)], Allocate(wl, channel), work, num_threads)


def _store_columns(out, out_index, value, red_var, ow, ow0, lanes, accv, at=None):
    """The epilogue of `lanes` output columns from ow0 (red_var: their accumulator accv; at: other axes fixed): one
    vector store where the output is contiguous along ow and the epilogue vectorizes, else lane by lane."""
    at = dict(at or {})
    vs = vectorize_expr(value, ow, lanes, {red_var: accv}) \
        if lanes > 1 and linear_stride_is_one(out_index, ow) else None
    if vs is not None:
        return Store(out, substitute(out_index, {**at, ow: ow0}), substitute(vs, {**at, ow: ow0}))
    if lanes > 1:
        lane = Var("l")
        return For(lane, lanes, Store(out, substitute(out_index, {**at, ow: ow0 + lane}),
                                      substitute(value, {**at, ow: ow0 + lane, red_var: Lane(accv, lane)})), "unroll")
    return Store(out, substitute(out_index, {**at, ow: ow0}), substitute(value, {**at, ow: ow0, red_var: accv}))


ROW_BLOCK = 4               # output rows the plane path of the NCHW depthwise conv computes together


def _row_block(conv, rt, out, red, value, out_index, oh, ow, oh0, plane, PW, wl, KH, KW, OW, R):
    """ROW_BLOCK output rows from oh0 over a channel's padded plane (stride and dilation 1): each vector of the
    plane's rows is loaded once and feeds every output row whose kernel reaches it, (ROW_BLOCK - 1 + KH) x KW
    loads for ROW_BLOCK x KH x KW FMAs instead of one load per FMA (7x7 over 96 x 56 x 56: 345 -> 188-215 us,
    over 192 x 28 x 28: 198 -> 104-112 us; 5x5 over 96 x 56 x 56: 256 -> 98-160 us). One accumulator per row;
    columns in whole vectors, then one narrower vector."""
    owv, VL = Var("owv"), conv.caps.lanes
    stmts = []
    full = OW // VL
    for start, count, lanes in ((0, full, VL), (full * VL, 1, OW - full * VL)):
        if count == 0 or lanes == 0:
            continue
        acc = conv.local(rt.dtype, R * lanes, "racc")
        ow0 = as_expr(start) + owv * lanes
        accv = [VecLoad(acc, as_expr(r * lanes), lanes) if lanes > 1 else Load(acc, as_expr(r)) for r in range(R)]
        zero = Const(0.0, vec(rt.dtype, lanes) if lanes > 1 else rt.dtype)
        body = [Store(acc, as_expr(r * lanes), zero) for r in range(R)]
        for ir in range(R - 1 + KH):
            for q in range(KW):
                at = (oh0 + ir) * PW + ow0 + q
                xvec = VecLoad(plane, at, lanes) if lanes > 1 else Load(plane, at)
                for r in range(R):
                    kh = ir - r
                    if 0 <= kh < KH:
                        wt = Load(wl, as_expr(kh * KW + q))
                        body.append(Store(acc, as_expr(r * lanes),
                                          Fma(xvec, Broadcast(wt, lanes) if lanes > 1 else wt, accv[r])))
        body += [_store_columns(out, out_index, value, red.var, ow, ow0, lanes, accv[r], {oh: oh0 + r})
                 for r in range(R)]
        body = seq(*body)
        stmts.append(Allocate(acc, For(owv, count, body) if count > 1 else LetStmt(owv, as_expr(0), body)))
    return seq(*stmts)


DW_COLUMNS = 8             # output columns per register tile of the NCHW16c depthwise conv


def schedule_depthwise_blocked(conv: Converter, rt, out: Buffer, red, value: Expr, axes, shape, num_threads):
    """Depthwise conv2d on NCHW16c (depthwise_blocked): lanes = the 16 channels of a block, so every tap of every
    column is one vector FMA whatever the stride; rows = DW_COLUMNS output columns per tile. The block's taps are
    copied into a local array first (kept in registers). A zero pad fused into the group is read through: a kernel
    row outside the input is skipped by one branch, a border column leaves out its outside taps at compile time.
    Parallel over (batch, channel block, output row)."""
    a = rt.attrs
    x, w = a["x"], a["w"]
    sh, sw = a["stride"]
    dh, dw = a["dilation"]
    N, CB, OH, OW, L = shape
    _, KH, KW, _ = w.shape
    n, cb, oh, ow, lane = axes
    src, pt, pl = _unpadded(x)
    H, W = src.shape[2], src.shape[3]
    IH, IW = Var("ih"), Var("iw")
    xt = vectorize_expr(conv.convert(src[n, cb, IH, IW, lane], None), lane, L)
    wt = vectorize_expr(conv.convert(w[cb, IH, IW, lane], None), lane, L)
    if xt is None or wt is None:
        return None
    xt, wt = substitute(xt, {lane: as_expr(0)}), substitute(wt, {lane: as_expr(0)})
    wl = conv.local(rt.dtype, KH * KW * L, "wtap")
    wcopy = seq(*[Store(wl, as_expr((i * KW + j) * L), substitute(wt, {IH: as_expr(i), IW: as_expr(j)}))
                  for i in range(KH) for j in range(KW)])
    index = flat_index(axes, shape)
    rows_clip = pt > 0 or (OH - 1) * sh + (KH - 1) * dh - pt >= H
    lo = min(-(-pl // sw), OW)              # columns [lo, hi) read only inside the input
    hi = (W - 1 + pl - (KW - 1) * dw) // sw + 1 if W - 1 + pl - (KW - 1) * dw >= 0 else 0
    hi = max(lo, min(OW, hi))

    def columns(cols: list, inside: bool):
        """A tile over output columns `cols` (expressions; compile-time ints for the border ones)."""
        acc = conv.local(rt.dtype, len(cols) * L, "dacc")
        accv = lambda i: VecLoad(acc, as_expr(i * L), L)
        rows = []
        for i_kh in range(KH):
            ih = oh * sh + i_kh * dh - pt
            taps = []
            for j in range(KW):
                wv = VecLoad(wl, as_expr((i_kh * KW + j) * L), L)
                for i, col in enumerate(cols):
                    iw = col * sw + j * dw - pl
                    if not inside and not 0 <= iw < W:
                        continue
                    taps.append(Store(acc, as_expr(i * L), Fma(substitute(xt, {IH: ih, IW: as_expr(iw)}), wv, accv(i))))
            if taps:
                ok = binary("and", Bin("ge", ih, as_expr(0)), Bin("lt", ih, as_expr(H)))
                rows.append(IfThen(ok, seq(*taps)) if rows_clip else seq(*taps))
        init = [Store(acc, as_expr(i * L), Const(0.0, vec(rt.dtype, L))) for i in range(len(cols))]
        stores = [store_vector(value, red.var, out, index, lane, accv(i), {ow: as_expr(col)})
                  for i, col in enumerate(cols)]
        return Allocate(acc, seq(*init, *rows, *stores))

    stmts = []
    t = Var("ct")
    width = conv.knob("depthwise_blocked.columns", DW_COLUMNS, range(1, max(1, conv.caps.vector_registers - 4) + 1),
                      f"output columns per register tile (registers: columns + 1 <= "
                      f"{conv.caps.vector_registers - 3})")
    full = (hi - lo) // width
    if full:
        body = columns([as_expr(lo) + t * width + i for i in range(width)], True)
        stmts.append(For(t, full, body) if full > 1 else LetStmt(t, as_expr(0), body))
    rest = list(range(lo + full * width, hi))
    if rest:
        stmts.append(columns(rest, True))
    for j in list(range(0, lo)) + list(range(hi, OW)):
        stmts.append(columns([j], False))
    work = N * CB * OH * OW * KH * KW * L
    return parallel_over([(n, N), (cb, CB), (oh, OH)], Allocate(wl, seq(wcopy, *stmts)), work, num_threads)


UNROLL_MAX = 7              # the longest kernel row / column of the NCHW depthwise conv whose loop is unrolled
ACC_PARTS = 4               # accumulators per vector of columns in the NCHW depthwise conv (one per kernel row mod 4)
PLANE_BORDER = 4            # scalar border columns from which a wider map also takes the plane
PLANE_FLOATS = 4096         # largest padded window (floats) a depthwise channel copies into a local plane
PLANE_WIDENED = 16384       # ... of an 8-bit input (a 112 x 112 map's: 51 KB), widened into it once


def _fill_plane(plane: Buffer, src: Buffer, base: Expr, H: int, W: int, PH: int, PW: int, pt: int, pl: int, dtype: str,
                VL: int):
    """plane[PH, PW] = 0 (vectors of VL lanes), then input rows r < H (at plane row r + pt, column pl) copied as
    vectors."""
    def vstore(buf, at, lanes, value_of):
        return Store(buf, at, value_of(lanes)) if lanes > 0 else None
    z = Var("z")
    nz, tail = (PH * PW) // VL, (PH * PW) % VL
    zero = lambda k: Const(0.0, vec(dtype, k) if k > 1 else dtype)
    stmts = [For(z, nz, Store(plane, z * VL, zero(VL))) if nz else None,
             vstore(plane, as_expr(nz * VL), tail, zero)]
    rows, cols = min(H, PH - pt), min(W, PW - pl)
    if rows > 0 and cols > 0:
        r = Var("r")
        row = lambda k: VecLoad(src, base + r * W, k) if k > 1 else Load(src, base + r * W)
        stmts.append(For(r, rows, Store(plane, (r + pt) * PW + pl, row(cols))))
    return seq(*stmts)


def _fill_widened(plane: Buffer, src: Buffer, base: Expr, H: int, W: int, PH: int, PW: int, pt: int, pl: int,
                  zp: int, phases: int):
    """The plane of an 8-bit input (ops/int8_depthwise.py): input rows r < H at plane row r + pt, column pl, their
    bytes widened once, float32(int32(v) - zp); each plane row holds its columns col by phase, at
    (col % phases) * ps + col // phases (ps = ceil(PW / phases); phases = the conv's stride, so a strided conv's taps
    are contiguous); only the padding is zeroed (every other element is written)."""
    ps = -(-PW // phases)
    L = ps * phases
    rows, cols = min(H, PH - pt), min(W, PW - pl)
    if cols <= 0:
        rows = 0

    def zero(at, k):
        return Store(plane, at, Const(0.0, vec("float32", k) if k > 1 else "float32")) if k > 0 else None
    stmts = []
    for i, (a, b) in enumerate(((0, min(pt, PH)), (pt + max(rows, 0), PH))):     # the rows outside the input
        z = Var(f"z{i}")
        stmts.append(For(z, b - a, zero((z + a) * L, L)) if b > a else None)
    j = Var("j")
    for p in range(phases if rows > 0 else 0):
        r = Var(f"r{p}")
        c0 = pl + (p - pl) % phases                 # the first plane column of phase p with an input column
        k = len(range(c0, pl + cols, phases))
        a0 = c0 // phases if k else ps
        at = (r + pt) * L + p * ps
        body = [zero(at, a0), zero(at + a0 + k, ps - a0 - k)]
        if k:
            v = _widen(Load(src, base + r * W + (c0 - pl) + j * phases), zp)
            body.append(Store(plane, at + a0, substitute(vectorize_expr(v, j, k) if k > 1 else v, {j: as_expr(0)})))
        stmts.append(For(r, rows, seq(*body)))
    return seq(*stmts)
