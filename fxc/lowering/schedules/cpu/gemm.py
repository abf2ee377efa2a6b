"""Register-blocked vector schedules for conv2d and matmul (explicit vector loop IR, no auto-vectorizer).

Both are the same micro-kernel: a tile of `mr` rows x `nv` vectors of L output columns is kept in
vector accumulators while the reduction loops run; each step loads `nv` vectors of the packed B operand
(layout [..., blocks, K..., L], made by the `pack_lanes` op; L: the target's Caps.lanes, chosen by the passes),
broadcasts one A value per row and issues mr*nv FMAs. The group's epilogue (bias, batch norm, residual add,
activation) is applied when the tile is stored: vectorized along the lanes when the output is contiguous there,
lane by lane otherwise.

- conv2d_packed: rows = output columns (ow) of one output row, lanes = output channels;
  parallel over (batch, channel-block group, output row); its input and output NCHW or NCHW16c
  (use_blocked_layout: the tile's vectors are then contiguous blocks of the output; int8: channel blocks of bytes,
  use_int8_blocks, each word of the reduction 4 adjacent bytes read by one load, bytes_word).
- matmul_packed: rows = m, lanes = n; parallel over (batch, column-block group).
- depthwise convs: depthwise.py.
Vector width: the packed layouts' L, else the target's `Caps.lanes` (`conv.caps`: 16 float32 lanes on AVX-512,
8 on AVX2, 4 on SSE); nothing here assumes one.
bf16 forms (compute attrs bf16=True, ops/bf16.py): the same tiles over bf16x2 int32 words, one word (two
reduction steps) per step, accumulated by vdpbf16ps (`dot_bf16`) instead of an FMA.
Accepts the reduction Tensor (its `attrs` say which op it is) and the group's epilogue expression.
"""
from __future__ import annotations

import math

from ....symbolic.expr import (
    ITEMSIZE,
    Bin,
    Broadcast,
    Const,
    Expr,
    Fma,
    Lane,
    Load,
    Shuffle,
    Var,
    VecLoad,
    as_expr,
    binary,
    cast,
    dot_bf16,
    dot_i8,
    lanes_of,
    substitute,
    vec,
)
from ...loop_ir import Allocate, Buffer, For, IfThen, LetStmt, Store, seq
from ...lower import Converter, flat_index
from ...vectorize import linear_stride, linear_stride_is_one, vectorize_expr
from .column_strips import column_parts
from .default import parallel_over, transpose16

RESERVED_REGISTERS = 4      # vector registers a register tile leaves to the B vectors and the broadcast
CONV1X1_AS_GEMM = True      # 1x1 stride-1 convs: lanes along the output positions (schedule_conv1x1)


def acc_vectors(caps) -> int:
    """The accumulator budget of a register tile, in vectors of the target's Caps.lanes (one register each): the
    target's vector registers but RESERVED_REGISTERS (28 of AVX-512's 32; 12 of AVX2's and SSE's 16)."""
    return max(2, caps.vector_registers - RESERVED_REGISTERS)


def row_tile(rows: int, nv: int, caps) -> int:
    """Rows per tile: as many as the target's accumulator registers allow, preferring a divisor of `rows`."""
    acc = acc_vectors(caps)
    limit = max(1, min(acc // nv, 14 if nv > 1 else 24 * acc // 28))
    if rows <= limit:
        return rows
    for mr in range(limit, max(limit * 3 // 4, 1) - 1, -1):
        if rows % mr == 0:
            return mr
    return limit




def word_mac(attrs: dict):
    """The multiply-add of a packed conv/matmul's register tile: an FMA (None) over float32, vdpbf16ps over bf16x2
    words (attrs bf16), the 4-way byte dot into int32 over int8 words (attrs int8: ops/int8.py; the broadcast
    operand is the activation's word, signed where attrs signed_a say)."""
    if attrs.get("bf16"):
        return dot_bf16
    if attrs.get("int8"):
        return lambda acc, a, b: dot_i8(acc, a, b, attrs["signed_a"])
    return None


def bytes_word(v: Expr, shift: int) -> Expr:
    """The int8 word (ops/int8.py's word_of) of 4 adjacent bytes v (one vector load of 4 lanes): bytes (x - shift)
    mod 256, byte k at bits 8k. With shift 0 it is v's 32 bits as they are (LLVM folds it to a bitcast: one 32-bit
    load, where 4 byte loads at separately computed addresses stay 4 loads)."""
    w = None
    for k in range(4):
        b = cast("int32", Lane(v, as_expr(k)))
        if shift or v.dtype.startswith("int8"):     # (a signed byte is sign-extended: its byte masked out)
            b = binary("and", binary("sub", b, Const(shift, "int32")), Const(255, "int32"))
        b = binary("shl", b, Const(8 * k, "int32")) if k else b
        w = b if w is None else binary("or", w, b)
    return w


def rows_knob(conv: Converter, name: str, rows: int, nv: int) -> int:
    """Knob `name`: rows per register tile of nv vectors, from 1 to what the target's accumulator registers hold
    (default row_tile's choice)."""
    limit = max(1, min(rows, acc_vectors(conv.caps) // nv))
    return conv.knob(name, row_tile(rows, nv, conv.caps), range(1, limit + 1),
                     f"rows per register tile of {nv} accumulator vectors (registers: rows x {nv} <= "
                     f"{acc_vectors(conv.caps)})")


def vectors_knob(conv: Converter, blocks: int, used: int, default: int) -> tuple:
    """Knob conv2d.vectors of a float32 conv over packed weights: (vectors of L output channels per register tile,
    the channel-block groups the tiles cover). The packed weight has `blocks` blocks of L channels (pack_weights pads
    them to a multiple of its nv, the default), of which the output uses `used`: another width covers those with
    ceil(used / vectors) groups, within the packed blocks (MobileNetV2's 160 channels: 10 blocks packed as 12 for
    tiles of 3; tiles of 2 or 5 compute none of the 2 padding blocks). At most 8 vectors; conv2d.rows x
    conv2d.vectors within the accumulator registers."""
    acc = acc_vectors(conv.caps)
    nv = conv.knob("conv2d.vectors", default, [v for v in range(1, min(8, acc) + 1) if -(-used // v) * v <= blocks],
                   "vectors of output channels per register tile (its channel-block groups within the packed "
                   "weight's blocks)")
    conv.knob.constrain(f"conv2d.rows x conv2d.vectors <= {acc} accumulator registers",
                        lambda c: c.get("conv2d.rows", 1) * c["conv2d.vectors"] <= acc)
    return nv, blocks // nv if nv == default else -(-used // nv)


def parts_knob(conv: Converter, name: str, default: int, whole_tiles: int) -> int:
    """Knob `name`: parts a row of `whole_tiles` register tiles splits into among parallel work items (each at least
    two tiles, at most 8 parts; default: the schedule's rule)."""
    return conv.knob(name, default, range(1, max(1, min(8, whole_tiles // 2)) + 1),
                     "parallel parts a row of register tiles splits into (work split)")


def largest_divisor(n: int, min_quotient: int) -> int:
    """The largest d dividing n with n // d >= min_quotient (work items of d steps each, at least min_quotient of
    them); 1 when none."""
    return max([d for d in range(1, n + 1) if n % d == 0 and n // d >= min_quotient] or [1])


def groups_per_item(groups: int, items: int, num_threads: int) -> int:
    """How many of `groups` (channel tiles) one parallel work item runs in a row, sharing a local copy of its input,
    when there are `items` work items per group: as many as still leave 8 work items per thread."""
    return largest_divisor(groups, -(-8 * num_threads // items))


class Tile:
    """One register tile: rows row0..row0+mr-1, lane blocks blk0..blk0+nv-1 (of `lanes` columns: the packed
    operand's, else the target's Caps.lanes)."""

    def __init__(self, conv: Converter, mr: int, nv: int, dtype: str, lanes: int | None = None):
        self.mr, self.nv, self.dtype = mr, nv, dtype
        self.lanes = lanes or conv.caps.lanes
        self.acc = conv.local(dtype, mr * nv * self.lanes, "vacc")

    def slot(self, i: int, v: int) -> Expr:
        return as_expr((i * self.nv + v) * self.lanes)

    def vector(self, i, v) -> Expr:
        return VecLoad(self.acc, self.slot(i, v), self.lanes)

    def compute(self, red_loops: list, a_of, b_of, mac=None, start=None):
        """acc = start (0, or start(i, v): a partial sum kept from an earlier part of the reduction);
        for red...: acc[i][v] = mac(acc[i][v], broadcast(a_of(i)), b_of(v)) (default: an FMA)."""
        mac = mac or (lambda acc, a, b: Fma(a, b, acc))
        vt = vec(self.dtype, self.lanes)
        init = seq(*[Store(self.acc, self.slot(i, v), Const(0.0, vt) if start is None else start(i, v))
                     for i in range(self.mr) for v in range(self.nv)])
        bvec = [b_of(v) for v in range(self.nv)]
        upd = []
        for i in range(self.mr):
            a = Broadcast(a_of(i), self.lanes)
            for v in range(self.nv):
                upd.append(Store(self.acc, self.slot(i, v), mac(self.vector(i, v), a, bvec[v])))
        body = seq(*upd)
        for var, ext in reversed(red_loops):
            body = For(var, ext, body)
        return seq(init, body)


def store_tile(conv: Converter, tile: Tile, value: Expr, red_var: Var, out: Buffer, out_index: Expr,
               row0: Expr, col0: Expr, row_axis: Var, lane_axis: Var, n_cols: int, transpose: bool = False):
    """Write the tile (rows row0.., columns col0..) through the epilogue `value` (an expression over
    row_axis, lane_axis and red_var): unrolled vector stores when the output is contiguous along the lanes,
    else (transpose: an int8 conv's NCHW output, contiguous along the rows) the tile transposed in registers, or the
    accumulators spilled to a small local tile and a loop applying the epilogue per element."""
    lanes = tile.lanes
    width = tile.nv * lanes
    if linear_stride_is_one(out_index, lane_axis):
        vs = vectorize_expr(value, lane_axis, lanes, {red_var: tile.vector(0, 0)})
        if vs is not None:
            whole = seq(*[Store(out, substitute(out_index, sub), substitute(
                vectorize_expr(value, lane_axis, lanes, {red_var: tile.vector(i, v)}), sub))
                for i in range(tile.mr) for v in range(tile.nv)
                for sub in [{row_axis: row0 + i, lane_axis: col0 + v * lanes}]])
            if n_cols % width == 0:
                return whole
            # columns past a multiple of the tile's width (ViT's 197): only the last column tile is partial,
            # so every other tile stores its vectors as they are (8.5x fewer instructions than element by element)
            return IfThen(Bin("le", col0 + width, as_expr(n_cols)), whole,
                          _store_elements(conv, tile, value, red_var, out, out_index, row0, col0, row_axis, lane_axis,
                                          n_cols))
    if transpose:
        st = _store_transposed(tile, value, red_var, out, out_index, row0, col0, row_axis, lane_axis, n_cols)
        if st is not None:
            return st
    return _store_elements(conv, tile, value, red_var, out, out_index, row0, col0, row_axis, lane_axis, n_cols)


def _store_transposed(tile: Tile, value: Expr, red_var: Var, out: Buffer, out_index: Expr, row0: Expr, col0: Expr,
                      row_axis: Var, lane_axis: Var, n_cols: int):
    """An output contiguous along the rows (an int8 conv's NCHW output, a few output columns a tile): each vector's
    rows transposed in registers (transpose16: the rows padded to `lanes` with zeros), so every column's mr rows are
    one vector through the epilogue and one store, with no spill and no strided reads of it (the spill path's column
    of mr rows is a gather from the local tile). Vectors past n_cols (the packing's padded lane blocks) are skipped.
    None unless the lanes are a power of two, mr is at most the lanes, n_cols whole vectors and the epilogue
    vectorizes along the rows."""
    lanes, mr = tile.lanes, tile.mr
    if mr < 2 or mr > lanes or lanes & (lanes - 1) or n_cols % lanes or not linear_stride_is_one(out_index, row_axis):
        return None
    zero = Const(0, vec(tile.dtype, lanes))
    stmts = []
    for v in range(tile.nv):
        cols = transpose16([tile.vector(i, v) for i in range(mr)] + [zero] * (lanes - mr))
        part = []
        for j in range(lanes):
            col = cols[j] if mr == lanes else Shuffle(cols[j], cols[j], list(range(mr)))
            vs = vectorize_expr(value, row_axis, mr, {red_var: col})
            if vs is None:
                return None
            sub = {row_axis: row0, lane_axis: col0 + (v * lanes + j)}
            part.append(Store(out, substitute(out_index, sub), substitute(vs, sub)))
        block = seq(*part)
        stmts.append(block if n_cols % (tile.nv * lanes) == 0
                     else IfThen(Bin("lt", col0 + v * lanes, as_expr(n_cols)), block))
    return seq(*stmts)


def _store_elements(conv, tile, value, red_var, out, out_index, row0, col0, row_axis, lane_axis, n_cols):
    """store_tile's path for outputs not contiguous along the lanes, and for a tile past the last column: the
    accumulators spilled to a small local tile, then the epilogue per column (a vector along rows when the output
    is contiguous there) or per element."""
    width = tile.nv * tile.lanes
    spill = conv.local(tile.dtype, tile.mr * width, "tile")
    stmts = [Store(spill, tile.slot(i, v), tile.vector(i, v)) for i in range(tile.mr) for v in range(tile.nv)]
    ci, ri = Var("ci"), Var("ri")
    if tile.mr > 1 and linear_stride_is_one(out_index, row_axis):
        # output contiguous along the rows (NCHW conv): per column, the tile's rows as one vector
        col_vec = VecLoad(spill, ci, tile.mr, width)
        vs = vectorize_expr(value, row_axis, tile.mr, {red_var: col_vec})
        if vs is not None:
            sub = {row_axis: row0, lane_axis: col0 + ci}
            body = Store(out, substitute(out_index, sub), substitute(vs, sub))
            if n_cols % width:
                body = IfThen(Bin("lt", col0 + ci, as_expr(n_cols)), body)
            return seq(*stmts, For(ci, width, body))
    sub = {row_axis: row0 + ri, lane_axis: col0 + ci}
    body = Store(out, substitute(out_index, sub),
                 substitute(value, {**sub, red_var: Load(spill, ri * width + ci)}))
    if n_cols % width:
        body = IfThen(Bin("lt", col0 + ci, as_expr(n_cols)), body)
    return seq(*stmts, For(ci, width, For(ri, tile.mr, body, "vectorize")))


# -- register tiles along rows (shared by conv and matmul) -------------------------------------------------------------
def row_tiles(conv: Converter, dtype: str, extent: int, nv: int, reduce_axes, a_of, b_of, store, mac=None,
              mr: int | None = None, prologue=None, inner=None, chunk=None, lanes: int | None = None):
    """Cover `extent` rows with register tiles of `mr` (default row_tile(extent, nv)) rows, then one tail tile: each
    accumulates a_of(i, r0) (scalar of row r0 + i) x b_of(v) (vector v of the packed operand) over reduce_axes, then
    store(tile, r0). prologue(rows, r0): a statement run once per tile before it; inner: a (Var, extent) loop around
    the accumulate-and-store, so one prologue serves several column blocks. chunk: (Var c, parts) to cover only
    part c of the whole tiles (the last part shorter when parts does not divide them), the tail tile with it.
    lanes: of b_of's vectors (the packed operand's; None: the target's Caps.lanes)."""
    mr = mr or row_tile(extent, nv, conv.caps)
    full = (extent // mr) * mr
    stmts = []
    for start, count, width in ((0, extent // mr, mr), (full, 1, extent - full)):
        if count == 0 or width == 0:
            continue
        tile = Tile(conv, width, nv, dtype, lanes)
        t = Var("rt")
        guard = None
        if chunk is not None and start == 0:
            per = -(-count // chunk[1])
            if count % chunk[1]:
                guard = Bin("lt", chunk[0] * per + t, as_expr(count))
            count = per
            r0 = (chunk[0] * count + t) * width
        else:
            r0 = as_expr(start) + t * width
        body = seq(tile.compute(reduce_axes, lambda i, r0=r0: a_of(i, r0), b_of, mac), store(tile, r0))
        if inner is not None:
            body = For(inner[0], inner[1], body)
        if prologue is not None:
            body = seq(prologue(width, r0), body)
        if guard is not None:
            body = IfThen(guard, body)
        loop = Allocate(tile.acc, For(t, count, body) if count > 1 else LetStmt(t, as_expr(0), body))
        if chunk is not None and start != 0:
            loop = IfThen(Bin("eq", chunk[0], as_expr(chunk[1] - 1)), loop)
        stmts.append(loop)
    return seq(*stmts)


def row_parts(whole_tiles: int, tasks: int, num_threads: int) -> int:
    """Into how many parts a matmul's rows split so that its parallel tasks (tasks: column blocks x batch) share
    evenly among the threads: 1 when they already do, else the fewest parts (at most 8, each at least two whole
    row tiles) that make a multiple of the threads. ConvNeXt's [3136, 384] x [384, 96]: 3 column blocks on 2
    threads left one idle a third of the time (1380-1490 -> 1050-1130 us)."""
    if num_threads <= 1 or tasks % num_threads == 0:
        return 1
    return next((p for p in range(2, 9) if 2 * p <= whole_tiles and tasks * p % num_threads == 0), 1)


def _row_split(conv: Converter, whole_tiles: int, tasks: int, num_threads: int):
    """(row_tiles' chunk, the parallel axis it adds) for row_parts' split (knob matmul.row_parts); (None, []) when the
    rows stay whole."""
    parts = parts_knob(conv, "matmul.row_parts", row_parts(whole_tiles, tasks, num_threads), whole_tiles)
    if parts == 1:
        return None, []
    rc = Var("rc")
    return (rc, parts), [(rc, parts)]


L1_SET_SPAN = 4096          # bytes: addresses this far apart share an L1 data-cache set (64 sets of 64-byte lines)
L1_ROWS_PER_SET = 8         # rows a tile may keep in one set (12 ways, the rest for the streaming operand)


def rows_per_set(stride_bytes: int, rows: int) -> int:
    """The most of `rows` rows, `stride_bytes` apart, that fall in one L1 set: a tile whose broadcast operand
    keeps more lines than the set has ways evicts its own rows on every step (e.g. rows of 1024 floats)."""
    sets = [(i * stride_bytes) % L1_SET_SPAN // 64 for i in range(rows)]
    return max(sets.count(x) for x in set(sets))


# -- conv2d over packed weights ------------------------------------------------------------------------------------
def schedule_conv2d_packed(conv: Converter, rt, out: Buffer, red, value: Expr, axes, shape, num_threads):
    a = rt.attrs
    blocked_in, blocked_out = bool(a.get("blocked_in")), bool(a.get("blocked_out"))
    grouped = a.get("groups", 1) > 1
    if CONV1X1_AS_GEMM and not (blocked_in or blocked_out or grouped):
        flat = schedule_conv1x1(conv, rt, out, red, value, axes, shape, num_threads)
        if flat is not None:
            return flat
    x, wp = a["x"], a["w"]
    sh, sw = a["stride"]
    dh, dw = a["dilation"]
    if blocked_out:
        N, OB, OH, OW, _ = shape
        n, ob, oh, ow, lane = axes
    else:
        N, O, OH, OW = shape
        n, o, oh, ow = axes
    OBP, C, KH, KW, L = wp.shape
    nv = a["nv"]
    wbuf = conv.bufs[wp]
    bf16 = bool(a.get("bf16"))          # C counts bf16x2 words (channel pairs)
    per_word = 2 if bf16 else 4 if a.get("int8") else 1     # ... or int8 words (channel quads)
    c, kh, kw = Var("c"), Var("kh"), Var("kw")
    x_word = "x_shift" in a     # int8 over channel blocks of bytes: a word is 4 adjacent bytes of a block
    # the elements of an input block: 16 channels (8 bf16x2 words; 4 int8 words of a block of 16 bytes)
    li = x.shape[4] // 4 if x_word else x.shape[4] if blocked_in else L

    # NCHW16c input: channel c at block c // 16, lane c % 16. A reduction over whole blocks at least as long as the
    # output's channels (a projecting conv) runs as (block, taps, lane), the lane loop innermost: 16 steps at constant
    # offsets once unrolled (MobileNetV2's 96 -> 24 and 576 -> 96 convs: 0.110 -> 0.090 ms, 0.116 -> 0.100 ms; its
    # expanding convs ran 10% slower that way)
    split = blocked_in and C % li == 0 and (C * per_word >= (OB * L if blocked_out else O) or bool(x_word))
    cb, cl = Var("cb"), Var("cl")
    cc = cb * li + cl if split else c

    # bf16 words of an NCHW16c input computed in the group (pack_bf16_pairs read through, fuse_ops): each row tile
    # first makes the words of the input columns it reads into a local panel [KH][span][CB * 8], which serves
    # `per` channel-block groups in a row
    staged = blocked_in and conv.bufs.get(x) is None
    groups = OBP // nv
    if not (staged or grouped or per_word > 1):
        nv, groups = vectors_knob(conv, OBP, shape[1] if blocked_out else -(-shape[1] // L), nv)
    per, chunk, g = 1, Var("obc"), Var("obg")
    if staged:
        per = groups_per_item(groups, N * OH, num_threads)
        obb = chunk * per + g
    else:
        obb = Var("obb")
    mr = rows_knob(conv, "conv2d.rows", OW, nv)
    span = (mr - 1) * sw + (KW - 1) * dw + 1
    CP = x.shape[1] * li
    panel = conv.local(x.dtype, KH * span * CP, "xpanel") if staged else None

    def a_of(i, ow0):
        ih, iw = oh * sh + kh * dh, (ow0 + i) * sw + kw * dw
        if staged:
            return Load(panel, (kh * span + i * sw + kw * dw) * CP + cc)
        if x_word:
            blk, j = (cb, cl) if split else (binary("idiv", c, li), binary("imod", c, li))
            first = conv.convert(x[n, blk, ih, iw, j * 4], None)   # a buffer (no prologue fuses into a conv)
            return bytes_word(VecLoad(first.args[0], first.args[1], 4), a["x_shift"])
        if split:
            return conv.convert(x[n, cb, ih, iw, cl], None)
        if blocked_in:
            return conv.convert(x[n, binary("idiv", c, li), ih, iw, binary("imod", c, li)], None)
        if grouped:     # a tile's nv blocks lie in one group (conv2d_grouped_packed): its C input channels
            return conv.convert(x[n, binary("idiv", obb * nv, (O // a["groups"]) // L) * C + c, ih, iw], None)
        return conv.convert(x[n, c, ih, iw], None)

    def fill(rows, ow0):
        """The panel of a tile of `rows` output columns from ow0: its input columns' words, a vector per block."""
        khs, col, blk, lane = Var("skh"), Var("scol"), Var("sblk"), Var("slane")
        xe = conv.convert(x[n, blk, oh * sh + khs * dh, ow0 * sw + col, lane], None)
        xv = vectorize_expr(xe, lane, li)
        at = (khs * span + col) * CP + blk * li
        st = Store(panel, at, substitute(xv, {lane: as_expr(0)})) if xv is not None \
            else For(lane, li, Store(panel, at + lane, xe))
        cols = (rows - 1) * sw + (KW - 1) * dw + 1
        return For(khs, KH, For(col, cols, For(blk, x.shape[1], st)))

    def b_of(v):
        return VecLoad(wbuf, (((obb * nv + v) * C + cc) * KH + kh) * KW * L + kw * L, L)

    def store(tile, ow0):
        if blocked_out:
            return store_blocked(tile, value, red.var, out, axes, shape, ow0, obb * nv)
        return store_tile(conv, tile, value, red.var, out, flat_index(axes, shape), ow0, obb * (nv * L), ow, o, O,
                          transpose=bool(a.get("int8")))

    mac = word_mac(a)
    reduce = [(cb, C // li), (kh, KH), (kw, KW), (cl, li)] if split else [(c, C), (kh, KH), (kw, KW)]
    if x_word:      # int8 words of byte blocks: in the packed weight's order (word, KH, KW), its stream sequential
        reduce = [(cb, C // li), (cl, li), (kh, KH), (kw, KW)]
    work = N * (OB * L if blocked_out else O) * OH * OW * C * KH * KW
    if not staged:
        # a row whose input does not stay cached runs in strips, the groups innermost (schedules/cpu/column_strips)
        row_bytes = C * KH * x.shape[3] * (4 if x_word else ITEMSIZE[x.dtype])
        parts = parts_knob(conv, "conv2d.strips", column_parts(row_bytes, groups,
                                                               OW // mr, conv.caps), OW // mr)
        if parts > 1:
            rc = Var("rc")
            body = row_tiles(conv, rt.dtype, OW, nv, reduce, a_of, b_of, store, mac, mr, chunk=(rc, parts), lanes=L)
            return parallel_over([(n, N), (oh, OH), (rc, parts), (obb, groups)], body, work, num_threads)
        body = row_tiles(conv, rt.dtype, OW, nv, reduce, a_of, b_of, store, mac, mr, lanes=L)
        rows_outer = conv.knob("conv2d.order", "groups", ("rows",) if groups > 1 and OH > 1 else (),
                               "order of the parallel work items (without strips): groups = channel-block groups "
                               "outer, a group's weights reused over the output rows that follow; rows = output rows "
                               "outer, a row's input reused over the groups") == "rows"
        if rows_outer:
            return parallel_over([(n, N), (oh, OH), (obb, groups)], body, work, num_threads)
        return parallel_over([(n, N), (obb, groups), (oh, OH)], body, work, num_threads)
    body = row_tiles(conv, rt.dtype, OW, nv, reduce, a_of, b_of, store, mac, mr, prologue=fill, inner=(g, per),
                     lanes=L)
    return parallel_over([(n, N), (chunk, groups // per), (oh, OH)], Allocate(panel, body), work, num_threads)


def store_vector(value: Expr, red_var: Var, out: Buffer, index: Expr, lane: Var, acc: Expr, sub: dict):
    """Store the epilogue of one accumulator vector along `lane` (its lanes_of(acc) contiguous outputs): one vector
    store, or lane by lane where the epilogue does not vectorize."""
    lanes = lanes_of(acc.dtype)
    vs = vectorize_expr(value, lane, lanes, {red_var: acc})
    if vs is not None:
        at = {**sub, lane: as_expr(0)}
        return Store(out, substitute(index, at), substitute(vs, at))
    j = Var("l")
    at = {**sub, lane: j}
    return For(j, lanes, Store(out, substitute(index, at), substitute(value, {**at, red_var: Lane(acc, j)})), "unroll")


def store_blocked(tile: Tile, value: Expr, red_var: Var, out: Buffer, axes, shape, row0: Expr, blk0: Expr):
    """Write a tile to an NCHW16c output [N, OB, OH, OW, 16]: row i is column row0 + i, vector v is channel block
    blk0 + v, its 16 lanes contiguous (one vector store each; blocks past OB, the packing's padding, are skipped)."""
    n, ob, oh, ow, lane = axes
    index = flat_index(axes, shape)
    stmts = []
    for i in range(tile.mr):
        for v in range(tile.nv):
            st = store_vector(value, red_var, out, index, lane, tile.vector(i, v), {ow: row0 + i, ob: blk0 + v})
            stmts.append(st if shape[1] % tile.nv == 0 else IfThen(Bin("lt", blk0 + v, as_expr(shape[1])), st))
    return seq(*stmts)


# -- 1x1 stride-1 conv2d as a GEMM over all output positions ----------------------------------------------------------
def _flat_positions(value: Expr, oh: Var, ow: Var, width: int) -> bool:
    """value uses oh and ow only in load indices of the form ... + s * (oh * width + ow): then it is the same
    expression over the flat position p = oh * width + ow with oh = 0, ow = p."""
    seen = set()

    def ok(x) -> bool:
        if x in seen:
            return True
        seen.add(x)
        if x is oh or x is ow:
            return False
        if isinstance(x, Load):
            so, sw = linear_stride(x.args[1], oh), linear_stride(x.args[1], ow)
            return so is not None and sw is not None and so == width * sw
        return all(ok(c) for c in x.args if isinstance(c, Expr))

    return ok(value)


def conv1x1_as_gemm(channels: int, out_channels: int, positions: int) -> bool:
    """A 1x1 stride-1 conv runs as the GEMM over its positions (schedule_conv1x1) unless the map is small and
    reduced over more channels than it makes: then channel lanes (conv2d_packed) stream less."""
    return not (positions < 512 and channels > out_channels)


def schedule_conv1x1(conv: Converter, rt, out: Buffer, red, value: Expr, axes, shape, num_threads):
    """out[n, o, p] = sum_c w[o, c] * x[n, c, p] over the flat output positions p = oh * OW + ow (NCHW, 1x1 kernel,
    stride 1): lanes = positions (contiguous in x and in the output, so the epilogue stores whole vectors),
    rows = output channels (one broadcast weight each). Parallel over (batch, position block, channel tile).
    x is a group input, or computed in the group and read through (the bf16 words of float32 channel pairs,
    fuse_ops.py). None when the epilogue (or x) does not address positions as one flat row."""
    a = rt.attrs
    x, wp = a["x"], a["w"]
    N, O, OH, OW = shape
    OBP, C, KH, KW, L = wp.shape
    n, o, oh, ow = axes
    xbuf = conv.bufs.get(x)
    bf16 = bool(a.get("bf16"))      # C counts bf16x2 words (channel pairs)
    int8 = bool(a.get("int8"))      # ... or int8 words (channel quads)
    if (KH, KW) != (1, 1) or tuple(a["stride"]) != (1, 1) or tuple(x.shape) != (N, C, OH, OW) \
            or not _flat_positions(value, oh, ow, OW) \
            or not conv.knob("conv1x1.as_gemm",
                             conv1x1_as_gemm(C * (2 if bf16 else 4 if int8 else 1), O, OH * OW), (True, False),
                             "a 1x1 stride-1 conv as the GEMM over its positions (False: channel lanes)"):
        return None
    HW = OH * OW
    p = Var("p")
    c = Var("c")
    xflat = None
    if xbuf is None:    # x computed in the group (the bf16 words of float32 channel pairs): read through it
        xe = conv.convert(x[n, c, oh, ow], None)
        if not _flat_positions(xe, oh, ow, OW):
            return None
        xflat = substitute(xe, {oh: as_expr(0), ow: p})
    flat_value = substitute(value, {oh: as_expr(0), ow: p})
    out_index = (n * O + o) * HW + p
    wbuf = conv.bufs[wp]
    pb, ot = Var("pb"), Var("ot")
    lanes = conv.caps.lanes
    nv = conv.knob("conv1x1.vectors", 4 if HW >= 4 * lanes else max(1, -(-HW // lanes)),
                   range(1, min(4, -(-HW // lanes)) + 1), "vectors of positions per register tile")
    block = nv * lanes
    nb_full, rest = HW // block, HW % block
    blocks = [([lanes] * nv, nb_full)] if nb_full else []
    if rest:
        blocks.append(([lanes] * (rest // lanes) + ([rest % lanes] if rest % lanes else []), 1))
    mr = rows_knob(conv, "conv1x1.rows", O, nv)
    n_full, o_tail = O // mr, O % mr

    def tile(widths, p0, o0, rows):
        total = sum(widths)
        offs = [sum(widths[:v]) for v in range(len(widths))]
        acc = conv.local(rt.dtype, rows * total, "cacc")
        vt = lambda v: vec(rt.dtype, widths[v]) if widths[v] > 1 else rt.dtype
        slot = lambda i, v: as_expr(i * total + offs[v])
        accv = lambda i, v: VecLoad(acc, slot(i, v), widths[v]) if widths[v] > 1 else Load(acc, slot(i, v))
        src, xrow = (xbuf, (n * C + c) * HW + p0) if xflat is None else (xblock, c * block)
        bvec = [VecLoad(src, xrow + offs[v], widths[v]) if widths[v] > 1 else Load(src, xrow + offs[v])
                for v in range(len(widths))]
        upd = []
        for i in range(rows):
            oi = o0 + i
            wv = Load(wbuf, (binary("idiv", oi, L) * C + c) * L + binary("imod", oi, L))
            for v in range(len(widths)):
                wb = Broadcast(wv, widths[v]) if widths[v] > 1 else wv
                upd.append(Store(acc, slot(i, v), dot_bf16(accv(i, v), wb, bvec[v]) if bf16
                                 else dot_i8(accv(i, v), bvec[v], wb, a["signed_a"]) if int8
                                 else Fma(wb, bvec[v], accv(i, v))))
        init = [Store(acc, slot(i, v), Const(0.0, vt(v))) for i in range(rows) for v in range(len(widths))]
        stores = []
        for i in range(rows):
            for v in range(len(widths)):
                sub = {o: o0 + i, p: p0 + offs[v]}
                if widths[v] > 1:
                    vs = vectorize_expr(flat_value, p, widths[v], {red.var: accv(i, v)})
                    if vs is None:
                        return None
                else:
                    vs = substitute(flat_value, {red.var: accv(i, v)})
                stores.append(Store(out, substitute(out_index, sub), substitute(vs, sub)))
        return Allocate(acc, seq(*init, For(c, C, seq(*upd)), *stores))

    def over_channels(widths, p0):
        full = tile(widths, p0, ot * mr, mr)
        if o_tail == 0:
            return full
        tail = tile(widths, p0, as_expr(n_full * mr), o_tail)
        if full is None or tail is None:
            return None
        return IfThen(Bin("lt", ot, as_expr(n_full)), full, tail)

    n_ot = n_full + (1 if o_tail else 0)
    n_pb = nb_full + (1 if rest else 0)
    per = 1
    if xflat is not None:
        # x is computed (bf16 words of float32 pairs): each work item makes the block's words once into a local
        # buffer for `per` channel tiles in a row, as few per item as keep 8 items per thread
        per = groups_per_item(n_ot, N * n_pb, num_threads)

    def item(widths, p0):
        tiles = over_channels(widths, p0)
        if tiles is None or xflat is None:
            return tiles
        otc = Var("otc")
        tiles = For(otc, per, LetStmt(ot, oti * per + otc, tiles)) if per > 1 else LetStmt(ot, oti, tiles)
        fill = []
        for v, off in enumerate([sum(widths[:k]) for k in range(len(widths))]):
            xv = vectorize_expr(xflat, p, widths[v]) if widths[v] > 1 else xflat
            if xv is None:
                return None
            fill.append(Store(xblock, c * block + off, substitute(xv, {p: p0 + off})))
        return seq(For(c, C, seq(*fill)), tiles)

    xblock = conv.local(x.dtype, C * block, "xblock") if xflat is not None else None
    oti = Var("oti") if xflat is not None else ot
    main = item(blocks[0][0], pb * block) if nb_full else None
    tail = item(blocks[-1][0], as_expr(nb_full * block)) if rest else None
    if (nb_full and main is None) or (rest and tail is None):
        return None
    body = main if not rest else tail if not nb_full else IfThen(Bin("lt", pb, as_expr(nb_full)), main, tail)
    if xblock is not None:
        body = Allocate(xblock, body)
    work = N * O * HW * C
    return parallel_over([(n, N), (pb, n_pb), (oti, n_ot // per)], body, work, num_threads)


# -- matmul over a packed B -------------------------------------------------------------------------------------------
def schedule_matmul_packed(conv: Converter, rt, out: Buffer, red, value: Expr, axes, shape, num_threads):
    a = rt.attrs
    A, bp, trans_a, nv = a["a"], a["b"], a["trans_a"], a["nv"]
    batch = list(zip(axes[:-2], shape[:-2]))
    M, N = shape[-2:]
    NBP, K, L = bp.shape[-3:]
    m, nn = axes[-2:]
    bbuf = conv.bufs[bp]
    k, nbb = Var("k"), Var("nbb")
    b_batch = [as_expr(0) if bp.shape[d] == 1 else axes[len(axes) - 2 - (bp.ndim - 3) + d]
               for d in range(bp.ndim - 3)]
    a_batch = [as_expr(0) if A.shape[d] == 1 else axes[len(axes) - 2 - (A.ndim - 2) + d] for d in range(A.ndim - 2)]

    def a_of(i, m0):
        idx = (k, m0 + i) if trans_a else (m0 + i, k)
        return conv.convert(A[tuple(a_batch) + idx], None)

    def b_of_block(blk):
        return lambda v: VecLoad(bbuf, flat_index(tuple(b_batch) + (blk * nv + v, k, 0), bp.shape), L)

    def store_block(blk):
        return lambda tile, m0: store_tile(conv, tile, value, red.var, out, flat_index(axes, shape), m0,
                                           blk * (nv * L), m, nn, N)

    mac = word_mac(a)
    work = math.prod(shape) * K
    groups = NBP // nv
    mr = rows_knob(conv, "matmul.rows", M, nv)
    row = conv.convert(A[tuple(a_batch) + ((k, m) if trans_a else (m, k))], None)
    stride = linear_stride(row.args[1], m) if isinstance(row, Load) else None
    itemsize = ITEMSIZE[row.dtype]
    kstride = linear_stride(row.args[1], k) if isinstance(row, Load) else None
    kk = Var("kk")
    if trans_a and stride == 1 and kstride is not None and K >= 64 and \
            rows_per_set(abs(kstride) * itemsize, min(K, 64)) > L1_ROWS_PER_SET:
        # a[k, m] (a weight gradient's dY^T): a tile's rows of one k are adjacent, but consecutive k a whole row of A
        # apart (4 KiB for M = 1024: one L1 set, evicted every step). Each tile copies its columns, one vector of its
        # rows per k, into a dense panel [K][mr] (weight-gradient GEMMs: 92 -> 187 GFLOP/s).
        def copy_cols(rows, m0):
            first = substitute(a_of(0, m0), {k: kk})
            value = first if rows == 1 else VecLoad(first.args[0], first.args[1], rows, 1)
            return For(kk, K, Store(panel, kk * mr, value))
        panel = conv.local(row.dtype, K * mr, "apanel")
        return _panel_tiles(conv, rt, M, K, nv, mr, groups, batch, b_of_block, store_block, mac, work, num_threads, k,
                            panel, lambda i, m0: Load(panel, k * mr + i), copy_cols)
    if stride is None or K < 64 or rows_per_set(abs(stride) * itemsize, mr) <= L1_ROWS_PER_SET:
        chunk, split = _row_split(conv, M // mr, math.prod(n for _, n in batch) * groups, num_threads)
        body = row_tiles(conv, rt.dtype, M, nv, [(k, K)], a_of, b_of_block(nbb), store_block(nbb), mac, mr,
                         chunk=chunk, lanes=L)
        return parallel_over(batch + [(nbb, groups)] + split, body, work, num_threads)
    # The tile's rows of A would crowd into a few L1 sets (e.g. a row stride of a multiple of 4 KiB) and evict each
    # other on every step: each tile first copies its rows into a local panel of a padded stride.
    pstride = -(-K // L) * L
    while rows_per_set(pstride * itemsize, mr) > L1_ROWS_PER_SET:
        pstride += L
    panel = conv.local(row.dtype, mr * pstride, "apanel")

    def copy_rows(rows, m0):
        return seq(*[For(kk, K, Store(panel, as_expr(i * pstride) + kk, substitute(a_of(i, m0), {k: kk})), "vectorize")
                     for i in range(rows)])
    return _panel_tiles(conv, rt, M, K, nv, mr, groups, batch, b_of_block, store_block, mac, work, num_threads, k,
                        panel, lambda i, m0: Load(panel, as_expr(i * pstride) + k), copy_rows)


def _panel_tiles(conv, rt, M, K, nv, mr, groups, batch, b_of_block, store_block, mac, work, num_threads, k, panel,
                 a_of, copy):
    """matmul_packed's row tiles over a local copy of their part of A (`copy(rows, m0)` fills `panel`, `a_of` reads
    it): one copy serves `per` column blocks in a row."""
    per = largest_divisor(groups, num_threads)
    chunk, g = Var("nchunk"), Var("ng")
    blk = chunk * per + g
    rows, split = _row_split(conv, M // mr, math.prod(n for _, n in batch) * (groups // per), num_threads)
    body = row_tiles(conv, rt.dtype, M, nv, [(k, K)], a_of, b_of_block(blk), store_block(blk), mac, mr,
                     prologue=copy, inner=(g, per), chunk=rows, lanes=rt.attrs["b"].shape[-1])
    return parallel_over(batch + [(chunk, groups // per)] + split, Allocate(panel, body), work, num_threads)
