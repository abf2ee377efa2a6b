"""use_int8_blocks: the activations between packed int8 convs (use_int8) in channel blocks, NCHWc with c = L, the
target's lanes (Caps.lanes: 16 on AVX-512, 8 on AVX2, 4 on NEON), converted only where a reader needs NCHW.

    conv2d_packed_i8(pad(pack_i8_words(x, 1, shift), fill), ...)  -> conv2d_packed_i8(pad(x16, x_zp), ...;
                                                                                      blocked_in, blocked_out)
    f(x, y, scalar)   (elementwise: a residual add's dequantize -> add -> relu -> quantize)  -> f(x16, y16, scalar)

x16 is [N, C/L, H, W, L] (channel c at block c // L, lane c % L): four adjacent bytes of a block are the four channels
of an int8 word, so the conv reads its words straight from the bytes (ops/int8.py: one 32-bit load each on x86, where
the shift is 0) and no words tensor is made; a padded conv reads the bytes padded by x_zp (a copy, as the words' pad
was). Why: a conv's register tile holds L output channels a vector, which in NCHW must be transposed on the way out
(its epilogue then runs on vectors of the tile's 7 or 14 output columns, one per channel); in NCHWc every tile
vector is one whole-vector epilogue and one store of L bytes, residual adds included.

Which values: the 4-d uint8 / int8 / float32 values of a whole number of blocks made by a packed int8 conv of L lanes
or by an elementwise op (its full-size inputs blocked or made blocked, the others per-tensor or per-channel
operands; quantize / dequantize per tensor), that some reader takes blocked: the word pack of a packed conv (through
its pad) or an elementwise op whose output is blocked; iterated to a fixed point, as use_blocked_layout's
blocked_values (the float32 form of the same layout). Everything else reads NCHW: a blocked value is converted back
for such a reader (the pool, the head's mean, a depthwise conv: their interfaces stay NCHW; a graph output), and an
NCHW value a region reads is converted to blocks once: a max pool's 8-bit output (ResNet's stem pool, read by a conv
and a residual add), another elementwise input. The build option blocked_layout=False turns the pass off. Takes and
returns a Graph; outputs bit for bit the same.
"""
from __future__ import annotations

from ..graph import node_appender, with_inputs
from .use_blocked_layout import GEMM_POSITIONS, _elementwise, _side_operand, blocked_side

QUANT_OPS = ("quantize", "dequantize")      # elementwise, but per-channel only along their axis attribute
ENTRIES = ("max_pool2d",)                   # ops of a region's entry: their 8-bit output made NCHW, converted once


def _blockable(v, lanes: int) -> bool:
    return v.type.ndim == 4 and v.dtype in ("uint8", "int8", "float32") and isinstance(v.shape[1], int) \
        and v.shape[1] % lanes == 0 and v.node is not None


def _elementwise_ok(n, v) -> bool:
    """An elementwise node whose output v can run on blocks: its other inputs per tensor or per channel (a quantize's
    or dequantize's parameters per tensor)."""
    if not _elementwise(n):
        return False
    if n.op in QUANT_OPS:
        return tuple(n.inputs[0].shape) == tuple(v.shape) and all(p.type.ndim == 0 or tuple(p.shape) == (1,)
                                                                   for p in n.inputs[1:])
    return all(tuple(u.shape) == tuple(v.shape) or _side_operand(u, v.shape) is not None for u in n.inputs)


def _gemm_in_nchw(conv) -> bool:
    """A 1x1 stride-1 conv over a large map: over NCHW words it runs as the GEMM over positions (schedule_conv1x1),
    so it reads NCHW unless it also writes blocks (as use_blocked_layout's float32 convs)."""
    _, _, oh, ow = conv.outputs[0].shape[:4]
    return conv.inputs[1].shape[2:4] == (1, 1) and tuple(conv.attrs.get("stride", (1, 1))) == (1, 1) \
        and oh * ow >= GEMM_POSITIONS


def _words_from_blocks(words, users, S) -> bool:
    """The int8 words of an activation (pack_i8_words along channels) can be read from its blocks: their readers are
    packed int8 convs, directly or through a pad of H and W, none of them a GEMM over NCHW positions that writes
    NCHW."""
    readers = []
    for node, pos in users.get(words.id, ()):
        if node.op == "pad" and len(node.attrs["pad"]) == 4:
            readers += users.get(node.outputs[0].id, ())
        else:
            readers.append((node, pos))
    return all(r.op == "conv2d_packed_i8" and p == 0 and (r.outputs[0].id in S or not _gemm_in_nchw(r))
               for r, p in readers)


def blocked_int8_values(g, lanes: int) -> set:
    """Ids of the values the pass stores in blocks of `lanes` channels (the module's doc: which values)."""
    users = g.users()
    values = {o.id: o for n in g.nodes for o in n.outputs if _blockable(o, lanes)}
    S = set(values)

    def made_ok(v) -> bool:
        p = v.node
        if p.op == "conv2d_packed_i8":
            return p.inputs[1].shape[4] == lanes
        if p.op in ENTRIES:
            return v.dtype in ("uint8", "int8")
        full = [u for u in p.inputs if tuple(u.shape) == tuple(v.shape)]
        return _elementwise_ok(p, v) and any(u.id in S for u in full)

    def taken(v) -> bool:
        for node, pos in users.get(v.id, ()):
            if node.op == "pack_i8_words" and node.attrs["axis"] in (1, -3) \
                    and _words_from_blocks(node.outputs[0], users, S):
                return True
            if _elementwise(node) and node.outputs[0].id in S:
                return True
        return False

    def kept(v) -> bool:
        """Taken blocked, or 8 bits made by an elementwise op (a region's last quantize: converted back after it, a
        byte an element, rather than its inputs read across the blocks by the conv epilogue they join)."""
        return taken(v) or (v.dtype in ("uint8", "int8") and v.node.op not in ENTRIES
                            and v.node.op != "conv2d_packed_i8")

    changed = True
    while changed:
        keep = {vid for vid in S if made_ok(values[vid]) and kept(values[vid])}
        changed, S = keep != S, keep
    return S


def use_int8_blocks(g, ctx):
    """On a CPU target whose lanes hold whole words (a multiple of 4), unless the build option blocked_layout is
    False."""
    lanes = ctx.caps.lanes
    if not (ctx.target.is_cpu and ctx.blocked_layout) or lanes % 4 or \
            not any(n.op == "conv2d_packed_i8" for n in g.nodes):
        return g
    S = blocked_int8_values(g, lanes)
    if not S:
        return g
    users = g.users()
    blocked: dict = {}          # id of an NCHW value (in S, or an NCHW value read by a blocked op) -> NCHWc form
    sources: dict = {}          # id of the words of a value in S (pack_i8_words, its pad) -> (NCHWc bytes, shift)
    nchw: dict = {}             # id of a value in S -> its NCHW form, for a reader that needs it
    new_nodes = []
    add = node_appender(new_nodes)

    def to_blocks(v):
        if v.id not in blocked:
            n, c, h, w = v.shape
            t = add("reshape", [v], {"shape": (n, c // lanes, lanes, h, w)})
            blocked[v.id] = add("permute", [t], {"dims": (0, 1, 3, 4, 2)})
        return blocked[v.id]

    def as_nchw(v):
        if v.id not in S or v.node.op in ENTRIES:
            return v
        if v.id not in nchw:
            n, c, h, w = v.shape
            t = add("permute", [blocked[v.id]], {"dims": (0, 1, 4, 2, 3)})
            nchw[v.id] = add("reshape", [t], {"shape": (n, c, h, w)})
        return nchw[v.id]

    def keep(n, inputs, attrs=None):
        new_nodes.append(with_inputs(n, inputs, attrs))

    for n in g.nodes:
        out = n.outputs[0] if len(n.outputs) == 1 else None
        x = n.inputs[0] if n.inputs else None
        if n.op == "conv2d_packed_i8" and (x.id in sources or out.id in S):
            attrs = dict(n.attrs, blocked_in=x.id in sources, blocked_out=out.id in S)
            ins = [sources[x.id][0] if x.id in sources else x] + list(n.inputs[1:])
            if out.id in S:
                blocked[out.id] = add(n.op, ins, attrs)
            else:
                keep(n, ins, attrs)
        elif n.op == "pack_i8_words" and x.id in S and n.attrs["axis"] in (1, -3) \
                and _words_from_blocks(out, users, S):
            sources[out.id] = (blocked[x.id], n.attrs.get("shift", 0))     # the conv makes the words of the bytes
        elif n.op == "pad" and x.id in sources:
            src, shift = sources[x.id]
            sources[out.id] = (_pad_bytes(src, n.attrs, shift, add), shift)
        elif out is not None and out.id in S and n.op in ENTRIES:       # made in NCHW, then converted once
            keep(n, [as_nchw(u) for u in n.inputs])
            to_blocks(out)
        elif out is not None and out.id in S and n.op in QUANT_OPS:     # per tensor: its parameters as they are
            blocked[out.id] = add(n.op, [blocked[x.id] if x.id in S else to_blocks(x)] + list(n.inputs[1:]),
                                  dict(n.attrs))
        elif out is not None and out.id in S:         # elementwise
            ins = []
            for u in n.inputs:
                if tuple(u.shape) == tuple(out.shape):
                    ins.append(blocked[u.id] if u.id in S else to_blocks(u))
                    continue
                ins.append(u if u.type.ndim == 0 else blocked_side(u, out.shape, lanes, add))
            blocked[out.id] = add(n.op, ins, dict(n.attrs))
        elif any(u.id in S for u in n.inputs):        # a reader of the NCHW layout: the conversion back
            keep(n, [as_nchw(u) for u in n.inputs])
        else:
            new_nodes.append(n)
    g.outputs = [as_nchw(v) for v in g.outputs]      # a graph output in blocks: converted back
    g.nodes = new_nodes
    return g


def _pad_bytes(x16, attrs, shift: int, add):
    """The pad of H and W of NCHWc bytes x16 whose words the pad of a words tensor made (attrs: its pad, a fill of
    four (x_zp - shift) bytes): the fill byte x_zp itself (the conv makes the words of the padded bytes). Padded as
    [N, C/L, H, W * L], rows of whole vectors, a view of the same bytes: on [N, C/L, H, W, L] the kernel's rows are
    one vector each, which parallel loops split element by element (4x slower at 2 threads: 7 -> 30 us at 56x56)."""
    left, right, top, bottom = attrs["pad"]
    byte = (int(attrs["value"]) + shift) & 255
    zp = byte - 256 if x16.dtype == "int8" and byte >= 128 else byte
    n, cb, h, w, lanes = x16.shape
    rows = add("reshape", [x16], {"shape": (n, cb, h, w * lanes)})      # (rows of whole vectors: see the docstring)
    rows = add("pad", [rows], {"pad": (left * lanes, right * lanes, top, bottom), "value": float(zp),
                               "mode": "constant"})
    return add("reshape", [rows], {"shape": (n, cb, h + top + bottom, w + left + right, lanes)})

