"""use_winograd: stride-1 3x3 float32 convolutions where Winograd F(4x4,3x3) or F(2x2,3x3) (in bf16: F(2x2,3x3) over
bf16 operands) is faster than the direct kernel (winograd_tile).

    conv2d(pad(x, zeros (pw, pw, ph, ph)), w[K, C, 3, 3])  -> conv2d_winograd(x, winograd_weight(w), padding (ph, pw))
    conv2d(x, w[K, C, 3, 3])                                -> conv2d_winograd(x, winograd_weight(w), padding (0, 0))
    in bf16 (winograd_tile):                                   conv2d_winograd(x, pack_bf16_pairs(winograd_weight(w,
                                                                   tile 2), axis 3), tile 2)

The zero padding moves into the kernel (no padded copy). winograd_weight reads only the weight, so the build
runs it as a cached prepack step (redone when the weight changes) and fold_constants folds it for frozen
weights. The build option winograd="off" turns the pass off (the direct conv2d_packed kernel everywhere);
winograd="all" uses Winograd on every eligible conv, also where winograd_pays says the direct kernel is faster
(for measuring); "auto" (the default) where it pays.
"""
from __future__ import annotations

from ...lowering.blocks import ROW_BLOCK
from ...lowering.schedules import rule
from ...lowering.winograd import tiles
from ...symbolic.expr import Expr
from ..graph import node_appender
from .hoist import weight_derived
from .use_bf16 import exact_bf16, has_half_float_ops

BF16_MIN_SIDE = 28      # with a bf16 direct kernel at twice the FMA rate: Winograd (float32) only on maps this large
F4_MIN_TILES = 32       # float32 F(4x4) with fewer 4x4 tiles a pass over its weight: F(2x2) instead where it pays
F4_BF16_TILES = 256     # and, in bf16, only with this many 4x4 tiles per pass over its (8x larger) transformed weight:
                        # ResNet-18 bf16 at batch 1 runs 6% faster with F(2x2) bf16 on its 56x56 and 28x28 layers
                        # too (196 and 49 tiles; less weight to stream), at batch 8 float32 F(4x4) keeps up


def winograd_pays(c: int, k: int, n: int, oh: int, ow: int, bf16_direct: bool = False) -> bool:
    """Where Winograd beat the direct kernel when measured per layer (benchmarks/winograd_layers.py, this
    machine): enough channels for the GEMMs, at least 3 tiles along a row (the input transform runs one
    vector lane per tile) and enough 4x4 tiles per pass over the transformed weight (4x the direct weight's
    bytes). 7x7 stays direct (1.7x slower at batch 1, 1.2x at batch 8).
    bf16_direct: the direct kernel would run in bf16 on a CPU whose vdpbf16ps does twice the multiply-adds of
    an FMA (precision="bf16", backends/llvm/probe.py). Measured on ResNet-18 (Zen 4): 256 channels at 14x14
    take 0.53 ms direct in bf16 against 0.78 ms in float32 Winograd, while 128 at 28x28 (0.54 vs 0.43 ms) and
    64 at 56x56 (0.58 vs 0.40-0.55 ms) still favour Winograd."""
    if bf16_direct and min(oh, ow) < BF16_MIN_SIDE:
        return False
    return c >= 32 and k >= 32 and min(oh, ow) >= 9 and n * -(-oh // 4) * -(-ow // 4) >= 8


def winograd_tile(c: int, k: int, n: int, oh: int, ow: int, bf16_direct: bool = False, mode: str = "auto",
                  bf16_winograd: bool = True):
    """(tile m, bf16) of the Winograd form to use for a stride-1 3x3 conv over a weight, or None for the direct
    kernel: F(4x4) where winograd_pays with F4_MIN_TILES tiles a pass, else F(2x2) where f2_pays.
    bf16_direct (precision="bf16" on a CPU whose vdpbf16ps runs at twice the FMA rate): F(2x2) in bf16 where it
    pays, on the maps where the bf16 direct conv beats float32 F(4x4) and on those with few tiles a pass over the
    weight (F4_BF16_TILES); its rounding error is about 1.5x a bf16 direct conv's (F(4x4)'s would be 10x, so bf16
    never uses it). bf16_winograd False (a bfloat16 graph's exact ops): no bf16 form, so those maps take float32
    F(4x4) where it pays, else the bf16 direct conv. `python -m benchmarks.winograd_layers` times every form of a
    layer."""
    if mode == "off":
        return None
    if isinstance(n, Expr):         # a symbolic batch runs in blocks of ROW_BLOCK images (lowering/blocks.py)
        n = ROW_BLOCK
    f4_tiles = n * -(-oh // 4) * -(-ow // 4)
    if bf16_direct:
        if bf16_winograd and c % 2 == 0 and (min(oh, ow) < BF16_MIN_SIDE or f4_tiles < F4_BF16_TILES) \
                and (mode == "all" or f2_pays(c, k, n, oh, ow)):
            return (2, True)
        if min(oh, ow) < BF16_MIN_SIDE:
            return None
        return (4, False) if mode == "all" or winograd_pays(c, k, n, oh, ow, True) else None
    f4 = mode == "all" or winograd_pays(c, k, n, oh, ow)
    if f4 and (f4_tiles >= F4_MIN_TILES or mode == "all"):
        return (4, False)
    if f2_pays(c, k, n, oh, ow, bf16=False):
        return (2, False)
    return (4, False) if f4 else None


def f2_pays(c: int, k: int, n: int, oh: int, ow: int, bf16: bool = True) -> bool:
    """Where F(2x2) beat the direct kernel per layer (ResNet-18's, Zen 4, minimum of 60 interleaved calls; float32
    F(2x2) also beats F(4x4) below F4_MIN_TILES 4x4 tiles a pass). float32 on 7x7 maps, 512 channels: 5.9 against
    8.6 ms at batch 8, 0.99-1.05 against 1.13-1.23 ms at batch 1; 256 channels at 14x14, batch 1: 0.74-0.77 against
    0.79-0.83 ms for F(4x4). bf16 needs 32 2x2 tiles a pass over the transformed weight (16/9 the direct weight's
    bytes): 256 channels at 14x14 0.45 against 0.58 ms, 512 at 7x7 3.04 against 4.37 ms at batch 8 and a tie at
    batch 1."""
    return c >= 64 and k >= 64 and min(oh, ow) >= 7 and (not bf16 or n * -(-oh // 2) * -(-ow // 2) >= 32)


def _scaled(w, add) -> list:
    """winograd_weight's inputs for weight w: [w0, scale] when w = w0 * s with s [K, 1, 1, 1] (fold_scale_axis'
    batch norm folded into the weight; the transform is linear per output channel, so it scales its result
    instead, and no scaled copy of the weight is made: a prepack pass over the weight less, every training
    step), else [w]."""
    p = w.node
    if p is None or p.op != "mul" or len(p.inputs) != 2:
        return [w]
    for w0, s in (p.inputs, p.inputs[::-1]):
        if tuple(w0.shape) == tuple(w.shape) and w0.dtype == s.dtype == w.dtype \
                and tuple(s.shape) == (w.shape[0], 1, 1, 1):
            return [w0, add("reshape", [s], {"shape": (w.shape[0],)})]
    return [w]


def _adjoint(w):
    """(the forward weight, True) when w = permute(flip(w0, (2, 3)), (1, 0, 2, 3)), a conv's input-gradient weight
    (conv_transpose._input_grad_as_conv): winograd_weight reads w0 so, with no flipped copy made; else (w, False)."""
    p = w.node
    if p is not None and p.op == "permute" and tuple(p.attrs.get("dims", ())) == (1, 0, 2, 3):
        f = p.inputs[0].node
        if f is not None and f.op == "flip" and tuple(sorted(d % 4 for d in f.attrs.get("dims", ()))) == (2, 3):
            return f.inputs[0], True
    return w, False


VARYING_F2_MIN_SIDE = 14    # weights that change every call (training): float32 F(2x2) only on maps this large
TRAINING_TILE = 2           # the largest Winograd tile of a training step's graphs (weights_vary): F(4x4)'s rounding
                            # (its transforms' points 1/2 and 2) in the forward cost ResNet-18 at batch 4, 64x64 a
                            # gradient error of 1.3e-3 against float64 (eager float32: 3.3e-6, direct 5.6e-6);
                            # F(2x2) forward and backward 4.4e-6 (F(4x4) in the backward alone 6.5e-6): the
                            # activations' error goes through batch norm's batch statistics into every gradient
FORMS = {"f4": (4, False), "f2": (2, False), "off": None}      # the winograd knob's values


def conv_signature(n, x, padding) -> str:
    """What a conv's Winograd choice depends on: its attributes, its input and weight types and the zero padding the
    Winograd kernel absorbs (the key of its graph-level knob)."""
    return f"conv2d{sorted(n.attrs.items())!r}(x:{x.type!r},w:{n.inputs[1].type!r},pad:{padding})"


def _form(ctx, n, x, padding, choice, c, ow, fits, largest):
    """The conv's Winograd form: the knob `winograd` (f4, f2 or off: the forms that fit, of tiles up to largest;
    default: choice)."""
    name = next((k for k, v in FORMS.items() if v == choice), None)
    if name is None:            # a bf16 form: not a knob
        return choice
    forms = [k for k, v in FORMS.items() if v is None or (v[0] <= largest and fits(c, ow, *v))]
    return FORMS[ctx.knob(conv_signature(n, x, padding), "winograd", name, forms,
                          "the conv's Winograd form: F(4x4, 3x3), F(2x2, 3x3) or the direct kernel", n)]


def use_winograd(g, ctx):
    """On a CPU target: its Caps give the register tile's shape and the lanes of the transformed weight's channel
    blocks (Caps.lanes); ctx.winograd is the mode of winograd_tile ("auto", "off", "all").
    ctx.bf16_direct: see winograd_pays and winograd_tile; bf16 applies to convs over weights only (as use_bf16).
    In a bfloat16 graph (any precision) a conv over a weight whose operands are exactly bfloat16 values
    (use_bf16.exact_bf16) is routed by the same rule where ctx.bf16_exact_direct() (asked only when there is one),
    without the bf16 Winograd form: what stays direct, use_bf16 then computes on the bf16 dot products.
    ctx.weights_vary: the graph is a training step's (its weight inputs change on every call), so its tiles are at
    most TRAINING_TILE (accuracy: an inference graph keeps F(4x4)), and the weight's transform is
    redone every call, as the direct kernel's repack is; float32 F(2x2), whose transform writes 16/9 of the weight's
    bytes, then keeps only maps of VARYING_F2_MIN_SIDE and more. Measured with `python -m benchmarks.winograd_layers
    --forms direct,F4,F2 --varying` (ResNet-18's layers, minimum of 40 calls): 512 channels at 7x7 1.58 ms direct
    against 1.72 in F(2x2), where a fixed weight gives 1.20 against 1.02; 256 at 14x14 1.13 against 0.73; F(4x4) on
    28x28 and 56x56 0.47 and 0.44 against 1.08 and 1.07."""
    if not ctx.target.is_cpu:
        return g
    caps, bf16_direct, weights_vary, mode = ctx.caps, ctx.bf16_direct, ctx.weights_vary, ctx.winograd
    fits, lane_vectors = rule("cpu", "winograd_fits"), rule("cpu", "winograd_lane_vectors")
    exact = exact_bf16(g) if not bf16_direct and caps.bf16_dot and has_half_float_ops(g) else set()
    fixed = weight_derived(g) if bf16_direct or exact else set()
    new_nodes = []

    add = node_appender(new_nodes)
    for n in g.nodes:
        x, w = n.inputs if n.op == "conv2d" else (None, None)
        if x is None or n.outputs[0].dtype != "float32" or w.shape[2:] != (3, 3) or n.attrs.get("groups", 1) != 1 \
                or tuple(n.attrs.get("stride", (1, 1))) != (1, 1) or tuple(n.attrs.get("dilation", (1, 1))) != (1, 1):
            new_nodes.append(n)
            continue
        padding = (0, 0)
        p = x.node
        if p is not None and p.op == "pad" and p.attrs.get("mode", "constant") == "constant" \
                and float(p.attrs.get("value", 0.0)) == 0.0 and len(p.attrs["pad"]) == 4:
            pl, pr, pt, pb = p.attrs["pad"]
            if pl == pr >= 0 and pt == pb >= 0:
                x, padding = p.inputs[0], (pt, pl)
        b, k, oh, ow = n.outputs[0].shape
        c = x.shape[1]
        over_weight = w.is_const or w.id in fixed
        routed = over_weight and n.inputs[0].id in exact and w.id in exact and ctx.bf16_exact_direct()
        choice = winograd_tile(c, k, b, oh, ow, bf16_direct and over_weight or routed, mode, not routed)
        largest = TRAINING_TILE if weights_vary else FORMS["f4"][0]
        if choice is not None and choice[0] > largest:
            choice = (largest, choice[1])
        if not (bf16_direct or routed) and mode == "auto":
            choice = _form(ctx, n, x, padding, choice, c, ow, fits, largest)
        if choice is None or not fits(c, ow, *choice):
            new_nodes.append(n)
            continue
        m, bf16 = choice
        if weights_vary and not over_weight and m == 2 and not bf16 and min(oh, ow) < VARYING_F2_MIN_SIDE:
            new_nodes.append(n)
            continue
        nv = lane_vectors(tiles(ow, m), -(-k // caps.lanes), caps)
        blocks = -(-(-(-k // caps.lanes)) // nv) * nv
        w0, adjoint = _adjoint(w)
        u = add("winograd_weight", [w0] if adjoint else _scaled(w, add),
                dict(blocks=blocks, lanes=caps.lanes, tile=m, **({"adjoint": True} if adjoint else {})))
        if bf16:
            u = add("pack_bf16_pairs", [u], dict(axis=3))
        rep = add("conv2d_winograd", [x, u], dict(out_channels=k, padding=padding, nv=nv, tile=m))
        # the replacement keeps the original output Value (its id, name and users stay valid)
        out = n.outputs[0]
        rep.node.outputs[0] = out
        out.node, out.index = rep.node, 0
    g.nodes = new_nodes
    return g
