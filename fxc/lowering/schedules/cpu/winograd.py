"""Winograd F(m x m, 3x3) schedules for stride-1 3x3 conv2d (op conv2d_winograd), m = 4 or 2.

Accepts the conv2d_winograd reduction Tensor (attrs: x [N, C, H, W], u = winograd_weight(w) laid out
[a, a, KB, C, L] with a = m + 2, padding, nv, tile m; or, for bf16, u = pack_bf16_pairs(.., axis 3):
[a, a, KB, C/2, L] words) and the group's epilogue expression. Produces loop IR:

    parallel over (image n, tile row ty, output-channel group kg):
      per input channel c: strip[a][Wp] <- the tile row's a input rows, zero padded (vector copies)
                           V[a*a][c][tiles] <- B^T d B, one vector lane per tile (stride-m loads of the strip)
                           (bf16: per channel pair, both transforms packed into bf16x2 words)
      per group of mr tiles, per block of nv*L output channels:
        for xi in 0..a*a-1: M[xi] = V[xi](tiles x C) . U[xi](C x nv*L)      (register tile, as conv2d_packed;
                                                                             bf16: vdpbf16ps over channel pairs)
        Y = A^T M A per tile (vectors over the channels), kept in a small local tile
        out[n, k, m*ty+r, ow0:ow0+cols] = epilogue(Y[r, :, k])        (vector along the output row)

Where a task's V is small and several output-channel groups run as tasks of the same tile rows (batch 1, small
maps), V is made once instead, by a first parallel loop over channel chunks into the kernel's scratch memory,
and the groups' tasks only run the GEMMs over it.

F(4x4, 3x3) takes 36 products per output tile and (input, output) channel pair instead of 144; F(2x2, 3x3)
16 instead of 36, with transforms that round far less: its bf16 form (operands V and U rounded to bf16) has
about 1.5x the error of a bf16 direct conv, F(4x4)'s about 10x, so bf16 uses m = 2 only. Points 0, +-1, +-2,
inf for m = 4 (Lavin & Gray), 0, +-1, inf for m = 2; the weight transform U = G g G^T is the winograd_weight
op (a cached prepack step).
"""
from __future__ import annotations

from ....symbolic.expr import Bin, Const, Load, PackBf16, Var, VecLoad, as_expr, binary, dot_bf16, substitute, vec
from ...loop_ir import Allocate, For, IfThen, LetStmt, Store, seq
from ...lower import flat_index
from ...vectorize import vectorize_expr
from ...winograd import MATRICES, alpha, tiles, transform, transform_loops
from .default import parallel_over
from .gemm import Tile

V_BUDGET = 1 << 20          # bytes of transformed input one task keeps (L2)
SHARED_V = 850 << 10        # bytes of a task's V up to which output channel groups share one (see the schedule)
U_CHUNK = 16 << 10          # bytes of a U[xi] block's channel chunk that the task's tile rows take in turn (L1)
def fits(c: int, ow: int, m: int = 4, bf16: bool = False) -> bool:
    """One tile row's transformed input fits the task's budget (the kernel's scratch lives on the stack:
    V <= V_BUDGET, M <= V_BUDGET * 64 / C, a few MB at most). bf16: two bytes a channel."""
    return alpha(m) ** 2 * tiles(ow, m) * c * (2 if bf16 else 4) <= V_BUDGET


def tile_rows(tile_cols: int, nv: int, caps) -> int:
    """Tiles per register tile: the nv*mr accumulators, nv weight vectors and one broadcast fit the target's
    vector registers (32 of AVX-512, 16 of AVX2 and SSE: one vector of Caps.lanes each); a long tile row is cut into
    equal groups."""
    vectors = caps.vector_registers
    limit = max(1, min(14, (vectors - 1 - nv) // nv))
    groups = -(-tile_cols // limit)
    return -(-tile_cols // groups)


def lane_vectors(tile_cols: int, channel_blocks: int, caps) -> int:
    """Vectors of Caps.lanes output channels per register tile: the most FMAs per load (mr*nv / (mr+nv)) for the
    tile row's width on the target (caps), without padding the channel blocks (a padded block is wasted work)."""
    best, score = 1, 0.0
    for nv in (1, 2, 3, 4):
        mr = tile_rows(tile_cols, nv, caps)
        waste = (-(-channel_blocks // nv) * nv) / channel_blocks
        s = mr * nv / (mr + nv) / waste
        if s > score + 1e-9:
            best, score = nv, s
    return best


def schedule_conv2d_winograd(conv, rt, out, red, value, axes, shape, num_threads):
    a = rt.attrs
    x, u = a["x"], a["u"]
    ph, pw = a["padding"]
    nv = a["nv"]
    T = a.get("tile", 4)
    AL = alpha(T)
    AT, BT, _ = MATRICES[T]
    dt = rt.dtype
    N, K, OH, OW = shape
    _, C, H, W = x.shape
    KB, L = u.shape[2], u.shape[4]          # output channel blocks of L lanes (use_winograd: the target's)
    VL = conv.caps.lanes                    # the target's vector width (the input rows' copies)
    bf16 = u.dtype == "int32"           # U in bf16x2 words over channel pairs: V is made the same way
    CW = u.shape[3]                     # GEMM reduction steps: channels, or channel pairs
    if KB % nv or (bf16 and C != 2 * CW):
        return None
    TH, TW = tiles(OH, T), tiles(OW, T)
    Wp = TW * T + 2
    n, o, oh, ow = axes
    tt, row, kg = Var("tt"), Var("row"), Var("kg")
    ubuf = conv.bufs[u]
    # a task transforms R tile rows once and runs every GEMM over them, so each U[xi] block is read once per task
    R = max(1, min(TH, V_BUDGET // (AL * AL * TW * CW * 4)))
    R = conv.knob("winograd.task_rows", R, [r for r in (1, 2, 3, 4, 6, 8) if r < R],
                  "tile rows a task transforms and runs its GEMMs over (at most what V_BUDGET holds)")
    TT = -(-TH // R)
    R = -(-TH // TT)
    RT = R * TW                                     # tiles per task
    # a tile row's transform works on TWV >= TW lanes, a power of two (no split loads and stores of odd widths);
    # the extra lanes (stride-m reads past the row) land in the next row's slots of V, written after, or past
    # the task's last row (V's row of a (xi, c) is RT + TWV - TW long)
    TWV = 1 << (TW - 1).bit_length()
    RTV = RT + TWV - TW
    ty = tt * R + row
    guard = (lambda st: IfThen(Bin("lt", ty, as_expr(TH)), st)) if TH % R else (lambda st: st)

    # -- per input channel: the tile row's a input rows (zero padded), then V = B^T d B for all its tiles at once --
    over = T * (TWV - TW)                           # what the widest stride-m read passes the strip's end
    r, wq, c = Var("r"), Var("wq"), Var("c")
    y = ty * T - ph + r
    xval = conv.convert(x[n, c, y, wq - pw], None)
    if vectorize_expr(xval, wq, L) is None:
        return None
    lo, hi = min(pw, Wp), min(pw + W, Wp)
    row_ok = binary("and", Bin("ge", y, as_expr(0)), Bin("lt", y, as_expr(H)))
    tvt = vec(dt, TWV) if TWV > 1 else dt                       # one lane per tile of the row (stride m columns)

    def transformed(strip, channel):
        """(the statements filling `strip` with input channel `channel`'s rows, B^T d B of its tiles)."""
        xc = substitute(xval, {c: channel})

        def copy(at, lanes):
            xv = vectorize_expr(xc, wq, lanes) if lanes > 1 else xc
            return Store(strip, r * Wp + at, substitute(xv, {wq: at}))

        def zero(at, lanes):
            return Store(strip, r * Wp + at, Const(0.0, vec(dt, lanes) if lanes > 1 else dt))

        def chunks(lo, hi, store_of):
            """Vector stores covering strip row columns lo..hi-1."""
            j, full, rest = Var("wj"), (hi - lo) // VL, (hi - lo) % VL
            return seq(For(j, full, store_of(as_expr(lo) + j * VL, VL)) if full else None,
                       store_of(as_expr(lo + full * VL), rest) if rest else None)
        fill = For(r, AL, IfThen(row_ok, seq(chunks(0, lo, zero), chunks(lo, hi, copy), chunks(hi, Wp, zero)),
                                 chunks(0, Wp, zero)))
        d = [[VecLoad(strip, as_expr(ai * Wp + bi), TWV, T) if TWV > 1 else Load(strip, as_expr(ai * Wp + bi))
              for bi in range(AL)] for ai in range(AL)]
        return fill, transform(d, BT, BT, tvt)

    # output channel groups, so that every thread has tasks (each runs the GEMMs of its group over the task's tiles)
    blocks = KB // nv
    tasks = N * TT
    KG = next((g for g in range(1, blocks + 1) if blocks % g == 0 and tasks * g >= 2 * num_threads), blocks) \
        if num_threads > 1 else 1
    # one group a task: V is the task's own (a local, in L2). Several: every group would transform the same input
    # again (4x for ResNet-18's layers at batch 1), so V is made once, in parallel over channels, in memory the
    # groups share (scratch), and the GEMMs follow
    VSZ = AL * AL * CW * RTV
    shared = KG > 1 and VSZ * 4 <= SHARED_V
    strips = [conv.local(dt, AL * Wp + over, "wstrip") for _ in range(2 if bf16 else 1)]
    if shared:
        V = conv.scratch("int32" if bf16 else dt, tasks * VSZ, "wvs")
        vbase = (n * TT + tt) * VSZ
    else:
        V = conv.local("int32" if bf16 else dt, VSZ, "wv")   # [xi][c][tile]: a GEMM row's tiles adjacent
        vbase = as_expr(0)
    at_v = lambda e1, e2: vbase + (as_expr(e1 * AL + e2) * CW + c) * RTV + row * TW
    if bf16:            # channels 2c and 2c + 1 as one bf16x2 word per tile
        (fill0, v0), (fill1, v1) = transformed(strips[0], c * 2), transformed(strips[1], c * 2 + 1)
        fills = seq(fill0, fill1)
        vstores = [Store(V, at_v(e1, e2), PackBf16(v0[e1][e2], v1[e1][e2])) for e1 in range(AL) for e2 in range(AL)]
    else:
        fills, v = transformed(strips[0], c)
        vstores = [Store(V, at_v(e1, e2), v[e1][e2]) for e1 in range(AL) for e2 in range(AL)]
    if shared:          # channel chunks: CS channels each, enough chunks for every thread
        cc, cl = Var("cc"), Var("cl")
        CC = next(g for g in range(1, CW + 1) if CW % g == 0 and (tasks * g >= 4 * num_threads or g == CW))
        CS = CW // CC
        itrans = For(row, R, guard(For(cl, CS, LetStmt(c, cc * CS + cl, seq(fills, *vstores)))))
    else:
        itrans = For(row, R, guard(For(c, CW, seq(fills, *vstores))))
    if over:        # read but never used: zeros rather than whatever the stack held (a denormal is slow)
        itrans = seq(*[Store(st, as_expr(AL * Wp), Const(0.0, vec(dt, over))) for st in strips], itrans)
    for st in strips:
        itrans = Allocate(st, itrans)

    # -- per block of nv*L output channels: a*a GEMMs over the task's tiles, output transform, epilogue -------
    per_kg = blocks // KG
    width = nv * L
    kbg, xi = Var("kbg"), Var("xi")
    kb0 = (kg * per_kg + kbg) * nv
    out_index = flat_index(axes, shape)
    mr = tile_rows(TW, nv, conv.caps)
    groups = []                     # (first tile, count, tiles per group) along a tile row
    full = (TW // mr) * mr
    if TW // mr:
        groups.append((0, TW // mr, mr))
    if TW - full:
        groups.append((full, 1, TW - full))
    if OW % T and groups[-1][1] > 1:           # the last tile is partial: its group gets its own store
        s0, cnt, m = groups.pop()
        groups += [(s0, cnt - 1, m), (s0 + (cnt - 1) * m, 1, m)]
    M = conv.local(dt, AL * AL * RT * width, "wm")
    # the task's tile rows each run the GEMM over the same U[xi] block (CW channels x width): in chunks of CS_U
    # channels, the rows in turn, a chunk is read from L2 once and from L1 by the other rows (the partial sums
    # wait in M between chunks). A 512-channel 7x7 layer alone 1.10 -> 0.90 ms; ResNet-18 at batch 8, every
    # Winograd layer 5-9% faster (at batch 1 in the model its U streams from DRAM, and the layers stay the same)
    cu, cl = Var("cu"), Var("cl")
    CU = next((g for g in range(1, CW + 1) if CW % g == 0 and CW // g * width * 4 <= U_CHUNK), CW) if R > 1 else 1
    CS_U = CW // CU
    ch = cu * CS_U + cl if CU > 1 else as_expr(cl)
    yt_tmp = conv.local(dt, T * AL * L, "wyt")
    gemms, stores, accs = [], [], []
    for start, count, m in groups:
        t, r = Var("tg"), Var("yr")
        tx0 = as_expr(start) + t * m
        p0 = row * TW + tx0                       # first tile of the group within the task
        last_cols = OW - (start + (count - 1) * m) * T
        cols = min(m * T, last_cols) if count == 1 else m * T
        tile = Tile(conv, m, nv, dt, L)
        accs.append(tile.acc)
        at_m = lambda i, vv, p0=p0: ((xi * RT + p0 + i) * nv + vv) * L
        gemm = tile.compute([(cl, CS_U)], lambda i, p0=p0: Load(V, vbase + (xi * CW + ch) * RTV + p0 + i),
                            lambda vv: VecLoad(ubuf, ((xi * KB + kb0 + vv) * CW + ch) * L, L),
                            dot_bf16 if bf16 else None,
                            (lambda i, vv: VecLoad(M, at_m(i, vv), L)) if CU > 1 else None)
        keep = [Store(M, at_m(i, vv), tile.vector(i, vv)) for i in range(m) for vv in range(nv)]
        gemms.append(For(t, count, seq(gemm, *keep)) if count > 1 else LetStmt(t, as_expr(0), seq(gemm, *keep)))

        Y = conv.local(dt, T * m * T * width, "wy")
        i_, v_ = Var("ti"), Var("tv")
        mv = lambda ai, bi: VecLoad(M, (((as_expr(ai * AL) + bi) * RT + p0 + i_) * nv + v_) * L, L)
        ystore = lambda ri, si, val: Store(Y, (ri * m * T + si + i_ * T) * width + v_ * L, val)
        otrans = For(i_, m, For(v_, nv, transform_loops(mv, AT, AT, yt_tmp, ystore, L)))
        ci, j = Var("ci"), Var("j")
        k = kb0 * L + ci
        sub = {o: k, oh: ty * T + r, ow: tx0 * T}
        yrow = VecLoad(Y, r * (m * T * width) + ci, cols, width)
        vs = vectorize_expr(value, ow, cols, {red.var: yrow}) if cols > 1 else None
        if vs is not None:
            st = Store(out, substitute(out_index, sub), substitute(vs, sub))
        else:
            sub1 = {o: k, oh: ty * T + r, ow: tx0 * T + j}
            st = For(j, cols, Store(out, substitute(out_index, sub1),
                                    substitute(value, {**sub1, red.var: Load(Y, (r * (m * T) + j) * width + ci)})))
        if KB * L != K:
            st = IfThen(Bin("lt", k, as_expr(K)), st)
        st = For(ci, width, st)
        if OH % T:
            st = IfThen(Bin("lt", ty * T + r, as_expr(OH)), st)
        one = seq(otrans, For(r, T, st))
        stores.append(Allocate(Y, For(t, count, one) if count > 1 else LetStmt(t, as_expr(0), one)))
    if CU > 1:      # the first chunk adds to zeros
        zi = Var("zi")
        zero = Store(M, ((xi * RT + row * TW) * nv + zi) * L, Const(0.0, vec(dt, L)))
        gemm_loop = seq(For(row, R, guard(For(zi, TW * nv, zero))), For(cu, CU, For(row, R, guard(seq(*gemms)))))
    else:
        gemm_loop = For(row, R, guard(seq(*gemms)))
    block = seq(For(xi, AL * AL, gemm_loop), For(row, R, guard(seq(*stores))))
    for acc in accs:
        block = Allocate(acc, block)
    gemms_task = For(kbg, per_kg, block) if per_kg > 1 else LetStmt(kbg, as_expr(0), block)
    work = N * K * OH * OW * C * 9
    if shared:
        first = parallel_over([(n, N), (tt, TT), (cc, CC)], itrans, N * C * TH * TW * AL * AL * 8, num_threads)
        return seq(first, parallel_over([(n, N), (tt, TT), (kg, KG)], Allocate(M, Allocate(yt_tmp, gemms_task)),
                                    work, num_threads))
    per_task = Allocate(V, Allocate(M, Allocate(yt_tmp, seq(itrans, gemms_task))))
    return parallel_over([(n, N), (tt, TT), (kg, KG)], per_task, work, num_threads)
