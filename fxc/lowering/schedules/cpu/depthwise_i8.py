"""The integer depthwise conv's CPU schedule (ops/int8_depthwise.py's depthwise_conv2d_i8), NCHW, full vectors.

Takes the op's accumulator (the float32 sum over the widened bytes, float32(int32(x) - x_zp), exact) and its fused
epilogue; produces loop IR parallel over (batch, output channel) that, per channel (A/B figures: PT2E MobileNetV2's
17 depthwise convs at 1 thread, against depthwise.py's NCHW schedule):

- widens the channel's padded input once into a local float32 plane stored by **phase blocks**: padded row i and
  column j at block (i % sh, j % sw), row i // sh, column j // sw, the block's rows `pitch` floats apart. A tap of a
  strided conv is then a contiguous vector load, and so is one tap over several output rows of a block. A strided
  row is loaded and widened whole, its phases picked by shuffles (a strided byte load was 10 instructions a vector:
  the 112 -> 56 conv 180 -> 160 us);
- widens a map whose plane would pass PLANE_FLOATS (a 112 x 112 map: 51 KB, past a 32 KB L1) in **strips** of
  output rows, each strip's rows widened when it starts (the rows two strips share, twice): 176 -> 156 us there;
- computes in **full vectors** of Caps.lanes: the lanes past a row's end run on the plane's next columns (junk)
  and the epilogue stores the output's lanes first; the junk lanes land on the outputs of the channel's next row
  or vector, which a later store writes (the chunks of a row block run last first), and the map's last store keeps
  to the output (a shuffle of its lanes). A 14-column row is one 16-lane vector and one store, not 8 + 4 + 2;
- flattens maps of at most half a vector of columns: a vector spans several output rows (lane f = row * pitch +
  column), so a 7 x 7 map (pitch 9) is 4 vectors of 16 lanes, not 7 rows of 7;
- loads a small map (at most SMALL_MAP bytes a channel) as one vector and makes its whole plane with one shuffle
  (padding from zeros), and the channel's weights as one vector (the 14 -> 7 conv 36 -> 25 us, 7 x 7 maps 45 -> 38);
- computes wider maps R output rows at a time (row blocks): each plane vector is loaded once for every output row
  whose kernel reaches it ((R - 1) * sh + KH rows of loads for R * KH rows of FMAs).

The output is what the op defines, bit for bit: the same exact float32 sum (any order) and the epilogue's own
expression. Where this form does not apply (an input fused into the group, an epilogue that reads other tensors
by position, kernels of more than 7 x 7 taps) the NCHW depthwise schedule runs it (depthwise.py).
"""
from __future__ import annotations

from ....symbolic.expr import (
    Broadcast,
    Const,
    Fma,
    Lane,
    Load,
    Shuffle,
    Var,
    VecLoad,
    as_expr,
    binary,
    cast,
    compare,
    lanes_of,
    substitute,
    vec,
    walk,
)
from ...loop_ir import Allocate, Buffer, For, IfThen, Store, seq
from ...lower import Converter, flat_index
from ...vectorize import vectorize_expr
from .default import parallel_over
from .depthwise import _tap, _unpadded, _widen, schedule_depthwise

PLANE_FLOATS = 4096         # a channel's plane (floats) beyond which its rows are widened in strips (16 KB)
ROWS = (8, 7, 6, 5, 4)      # output rows a block computes together: the first that divides the strip, else 4
MAX_TAPS = 49               # kernels up to 7 x 7 (their taps in registers); larger ones: depthwise.py
SMALL_MAP = 256             # input bytes of a channel loaded as one vector, its plane made by one shuffle


def schedule_depthwise_i8(conv: Converter, rt, out: Buffer, red, value, axes, shape, num_threads):
    a = rt.attrs
    x, w = a["x"], a["w"]
    sh, sw = a["stride"]
    dh, dw = a["dilation"]
    N, O, OH, OW = shape
    _, _, KH, KW = w.shape
    n, o, oh, ow = axes
    src, pt, pl = _unpadded(x)
    sbuf = conv.bufs.get(src)
    if sbuf is None or src.dtype not in ("uint8", "int8") or KH * KW > MAX_TAPS \
            or any(v is oh or v is ow for v in walk(value)):
        return schedule_depthwise(conv, rt, out, red, value, axes, shape, num_threads)
    VL = conv.caps.lanes
    H, W = src.shape[2], src.shape[3]
    mult = O // src.shape[1]
    c = binary("idiv", o, as_expr(mult)) if mult > 1 else o
    PW = (OW - 1) * sw + (KW - 1) * dw + 1              # padded columns read
    pitch = -(-PW // sw)                                 # a block row's floats
    span = (KH - 1) * dh + 1                             # padded rows a row of outputs reads

    def plane_rows(rows):                                # a block's rows for `rows` output rows
        return -(-((rows - 1) * sh + span) // sh)

    def floats(rows):
        return sh * sw * plane_rows(rows) * pitch
    strip = OH
    if floats(OH) > PLANE_FLOATS:
        fit = max(r for r in range(1, OH + 1) if floats(r) <= PLANE_FLOATS or r == 1)
        strip = min(OH, max(4, fit // 4 * 4))
    rb = plane_rows(strip)
    block = rb * pitch
    flat = strip == OH and 2 * OW <= VL
    chunks = -(-((OH - 1) * pitch + OW) // VL)
    slack = VL + (KW - 1) * dw // sw + 1             # past the last block: a vector's junk lanes
    plane = conv.local("float32", sh * sw * block + slack, "plane")
    wl = conv.local("float32", KH * KW, "wtap")
    wbuf = conv.bufs.get(w)
    if wbuf is not None and KH * KW > 1:                # the channel's taps widened as one vector
        wcopy = Store(wl, as_expr(0), _widened(VecLoad(wbuf, o * (KH * KW), KH * KW), 0))
    else:
        wcopy = seq(*[Store(wl, as_expr(i * KW + j), _tap(conv, w, (o, 0, as_expr(i), as_expr(j))))
                      for i in range(KH) for j in range(KW)])
    base = (n * src.shape[1] + c) * (H * W)
    out_index = flat_index(axes, shape)
    geo = dict(sh=sh, sw=sw, dh=dh, dw=dw, KH=KH, KW=KW, rb=rb, pitch=pitch)

    def fill(oh0, rows):
        if strip == OH and H * W <= SMALL_MAP:
            return _fill_shuffled(plane, sbuf, base, (rows - 1) * sh + span, H, W, pt, pl, a.get("x_zp", 0), geo)
        return _fill(plane, sbuf, base, oh0 * sh - pt, (rows - 1) * sh + span, H, W, pl, a.get("x_zp", 0), geo)

    def tap(key):                                        # (kh, kw) -> (block, row offset, column offset)
        kh, kw = key
        return (kh * dh % sh) * sw + kw * dw % sw, kh * dh // sh, kw * dw // sw

    def store(accv, lanes, picks, oh_at, ow_at, wide=None):
        """The epilogue of accumulator vector accv; the output's lanes `picks` stored from (oh_at, ow_at) on. Where
        `wide` holds (a condition, or True), all `lanes` are stored, the picks first: the lanes past them land on
        outputs a later store of this channel writes (one store instead of a shuffle and 8 + 4 + 2 bytes)."""
        at = {oh: oh_at, ow: ow_at}
        picks = list(picks)
        if lanes == 1:
            return Store(out, substitute(out_index, at), substitute(value, {**at, red.var: accv}))
        vs = vectorize_expr(value, ow, lanes, {red.var: accv})
        if vs is None:
            return seq(*[Store(out, substitute(out_index, {oh: oh_at, ow: ow_at + i}),
                               substitute(value, {**at, red.var: Lane(accv, as_expr(p))}))
                         for i, p in enumerate(picks)])
        vs = substitute(vs, at)
        index = substitute(out_index, at)
        if picks == list(range(lanes)):
            return Store(out, index, vs)
        if isinstance(wide, Const):
            wide = bool(wide.value)
        exact = Store(out, index, Lane(vs, as_expr(picks[0])) if len(picks) == 1 else Shuffle(vs, vs, tuple(picks)))
        if wide is None or wide is False:
            return exact
        rest = [i for i in range(lanes) if i not in picks]
        full = Store(out, index, vs if picks == list(range(len(picks))) else Shuffle(vs, vs, tuple(picks + rest)))
        return full if wide is True else IfThen(wide, full, exact)

    def rows_block(oh0, r0, R):
        """R output rows from oh0 + r0 (r0 the strip's row), every column: vectors of VL lanes along the row, the
        last one narrower where at most half of it is the row's."""
        stmts = []
        for start in range(0, OW, VL):
            valid = min(VL, OW - start)
            lanes = VL if 2 * valid > VL else 1 << (valid - 1).bit_length()
            acc = conv.local("float32", R * lanes, "racc")
            accv = [VecLoad(acc, as_expr(r * lanes), lanes) if lanes > 1 else Load(acc, as_expr(r)) for r in range(R)]
            zero = Const(0.0, vec("float32", lanes))
            body = [Store(acc, as_expr(r * lanes), zero) for r in range(R)]
            loads: dict = {}
            for r in range(R):
                for kh in range(KH):
                    for kw in range(KW):
                        b, dr, dc = tap((kh, kw))
                        loads.setdefault((r + dr, b, dc), []).append((r, kh * KW + kw))
            for (rr, b, dc), uses in sorted(loads.items()):
                at = as_expr(b * block + dc + start) + (r0 + rr) * pitch
                xv = VecLoad(plane, at, lanes) if lanes > 1 else Load(plane, at)
                for r, t in uses:
                    wt = Load(wl, as_expr(t))
                    body.append(Store(acc, as_expr(r * lanes), Fma(xv, Broadcast(wt, lanes) if lanes > 1 else wt,
                                                                   accv[r])))
            # a row's lanes past the output spill onto the next row, stored later (the chunks run last first); the
            # map's last row stores its own lanes only
            last = compare("lt", oh0 + r0 + (R - 1), as_expr(OH - 1))
            body += [store(accv[r], lanes, range(valid), oh0 + r0 + r, as_expr(start), True if r < R - 1 else last)
                     for r in range(R)]
            stmts.append(Allocate(acc, seq(*body)))
        return seq(*stmts[::-1])

    def rows(oh0, count):
        """Output rows oh0 .. oh0 + count over the plane's strip: blocks of R rows, then the rest as one block."""
        R = next((r for r in ROWS if count % r == 0), 4)
        R = min(R, count)
        b = Var("rblk")
        full, rest = count // R, count % R
        return seq(For(b, full, rows_block(oh0, b * R, R)) if full > 1 else rows_block(oh0, as_expr(0), R),
                   rows_block(oh0, as_expr(full * R), rest) if rest else None)

    def flat_map():
        """The whole map in vectors over the block's flat positions f = row * pitch + column (junk lanes where
        column >= OW): each tap one load a vector; the valid lanes stored in order (the output is dense)."""
        stmts, done = [], 0
        for k in range(chunks):
            f0 = k * VL
            picks = [i for i in range(VL) if f0 + i < (OH - 1) * pitch + OW and (f0 + i) % pitch < OW]
            acc = conv.local("float32", VL, "facc")
            accv = VecLoad(acc, as_expr(0), VL)
            body = [Store(acc, as_expr(0), Const(0.0, vec("float32", VL)))]
            for kh in range(KH):
                for kw in range(KW):
                    b, dr, dc = tap((kh, kw))
                    xv = VecLoad(plane, as_expr(b * block + dr * pitch + dc + f0), VL)
                    body.append(Store(acc, as_expr(0), Fma(xv, Broadcast(Load(wl, as_expr(kh * KW + kw)), VL), accv)))
            body.append(store(accv, VL, picks, as_expr(0), as_expr(done), done + VL <= OH * OW))
            done += len(picks)
            stmts.append(Allocate(acc, seq(*body)))
        return seq(*stmts)

    zero_slack = Store(plane, as_expr(sh * sw * block), Const(0.0, vec("float32", slack)))
    if flat:
        channel = seq(fill(as_expr(0), OH), flat_map())
    else:
        s = Var("strip")
        full, rest = OH // strip, OH % strip
        channel = seq(For(s, full, seq(fill(s * strip, strip), rows(s * strip, strip))) if full > 1 else
                      seq(fill(as_expr(0), strip), rows(as_expr(0), strip)),
                      seq(fill(as_expr(full * strip), rest), rows(as_expr(full * strip), rest)) if rest else None)
    work = N * O * OH * OW * KH * KW
    return parallel_over([(n, N), (o, O)], Allocate(wl, Allocate(plane, seq(wcopy, zero_slack, channel))), work,
                         num_threads)


def _fill(plane: Buffer, src: Buffer, base, ih0, rows: int, H: int, W: int, pl: int, zp: int, geo: dict):
    """Padded rows i < rows of a strip (input row ih0 + i) into the plane's phase blocks: each block row's input
    columns widened, float32(int32(v) - zp), the padding and the rest of the row zeroed; a row outside the input
    zeroed whole."""
    sh, sw, rb, pitch = geo["sh"], geo["sw"], geo["rb"], geo["pitch"]
    block = rb * pitch

    def zero(at, k):
        return Store(plane, at, Const(0.0, vec("float32", k) if k > 1 else "float32")) if k > 0 else None
    stmts = []
    for bi in range(sh):
        count = len(range(bi, rows, sh))
        if not count:
            continue
        ri = Var(f"ri{bi}")
        ih = ih0 + ri * sh + bi
        inside, outside, row = [], [], None
        for bj in range(sw):
            at = as_expr((bi * sw + bj) * block) + ri * pitch
            k0 = max(0, -(-(pl - bj) // sw))                          # the first block column with an input column
            k1 = min(pitch, (W - 1 + pl - bj) // sw + 1) if W - 1 + pl - bj >= 0 else 0
            kn = max(0, k1 - k0)
            k0 = k0 if kn else 0
            inside += [zero(at, k0), zero(at + (k0 + kn), pitch - k0 - kn)]
            if kn:
                first = bj + k0 * sw - pl                               # its first input column
                if sw == 1:
                    j = Var("j")
                    v = _widen(Load(src, base + ih * W + first + j * sw), zp)
                    vv = substitute(vectorize_expr(v, j, kn) if kn > 1 else v, {j: as_expr(0)})
                else:           # the row widened once (contiguous), each phase's columns picked by a shuffle
                    row = row or _widened(VecLoad(src, base + ih * W, W), zp)
                    cols = [first + k * sw for k in range(kn)]
                    vv = Shuffle(row, row, tuple(cols)) if kn > 1 else Lane(row, as_expr(cols[0]))
                inside.append(Store(plane, at + k0, vv))
            outside.append(zero(at, pitch))
        ok = binary("and", compare("ge", ih, as_expr(0)), compare("lt", ih, as_expr(H)))
        stmts.append(For(ri, count, IfThen(ok, seq(*inside), seq(*outside))))
    return seq(*stmts)


def _fill_shuffled(plane: Buffer, src: Buffer, base, rows: int, H: int, W: int, pt: int, pl: int, zp: int,
                   geo: dict):
    """A small map's whole plane from one vector: the channel's H * W bytes loaded and widened at once, then each
    plane element picked from them or from zeros (the padding) by one shuffle, and stored whole."""
    sh, sw, rb, pitch = geo["sh"], geo["sw"], geo["rb"], geo["pitch"]
    n = H * W
    picks = []
    for p in range(sh * sw * rb * pitch):
        b, rest = divmod(p, rb * pitch)
        ri, cj = divmod(rest, pitch)
        i, j = ri * sh + b // sw, cj * sw + b % sw
        ih, iw = i - pt, j - pl
        picks.append(ih * W + iw if i < rows and 0 <= ih < H and 0 <= iw < W else n)
    xs = _widened(VecLoad(src, base, n), zp)
    return Store(plane, as_expr(0), Shuffle(xs, Const(0.0, vec("float32", n)), tuple(picks)))


def _widened(v, zp: int):
    """A vector of 8-bit values as float32(int32(v) - zp), lane-wise."""
    n = lanes_of(v.dtype)
    i = cast(vec("int32", n), v)
    return cast(vec("float32", n), i - Const(zp, vec("int32", n)) if zp else i)
