"""The requantisation rounds after every float32 op, as its definition does (ops/quant.py's `_epilogue_ref`, PyTorch's
and ONNX Runtime's): on inputs built so that one fused multiply-add (`acc * s + bias` rounded once) or a
reassociated product (`(acc * sx) * sw`, `acc * (s * (1 / sy))`) lands on the other side of a rounding tie, every
int8 kernel form gives the reference's integers bit for bit on every target: qconv2d and qmatmul as the CPU pass
rewrites them (the packed VNNI / vpmaddwd forms, depthwise_conv2d_i8) and in their generic forms elsewhere, and a
residual add's fused dequantize -> add -> quantize. Before the epilogue's ops were `Exact` (symbolic/expr.py), LLVM
fused them into vfmadd on `llvm` and `llvm -mcpu=haswell` and these outputs were one step off."""
import numpy as np
import pytest

from fxc.driver.build import build
from fxc.ops.registry import get_op
from fxc.relay_like.builder import Builder
from tests.targets import require_runtime

TARGETS = ("llvm", "llvm -mcpu=haswell", "opencl", "opengl", "webgpu", "wasm", "webgl")
SX, SY = np.float32(0.02), np.float32(0.05)

# (acc, w_scale, float32 bias, inverse): at x_scale 0.02 and y_scale 0.05, `acc * (sx * sw) + bias` rounded once lands
# on the other side of an integer's tie than rounded twice (found by searching float32 neighbours of a tie's bias)
FUSED = [(28850, 0.007169877644628286, 0.38798069953918457, False),
         (-14724, 0.006143768317997456, 0.03421700373291969, False),
         (-14165, 0.009012469090521336, -0.17176759243011475, False),
         (-5551, 0.007819559425115585, 0.09312749654054642, True),
         (14957, 0.007610352244228125, -0.15156064927577972, False),
         (14957, 0.007610352244228125, 1.948439359664917, True)]
# (acc, w_scale, inverse) with a zero bias: the product taken in another order gives another integer
REASSOCIATED = [(14999, 0.008083872497081757, False),      # acc * ((sx * sw) / sy)
                (-28579, 0.007916652597486973, True),      # ((acc * sx) * sw) * (1 / sy)
                (12282, 0.004376322962343693, True)]       # acc * ((sx * sw) * (1 / sy))


def _fused_value(acc, sw, bias, inverse):
    """The integer of the epilogue with `acc * s + bias` rounded once (an FMA), s = sx * sw in float32."""
    f = np.float32(acc * np.float64(SX * np.float32(sw)) + np.float64(np.float32(bias)))   # exact in float64
    return np.rint(f * (np.float32(1) / SY) if inverse else f / SY)


def _reassociated_values(acc, sw, inverse) -> set:
    """The integers of the epilogue's product taken in the two other orders LLVM's reassociation may choose."""
    s, r, a, w = SX * np.float32(sw), np.float32(1) / SY, np.float32(acc), np.float32(sw)
    if inverse:
        return {np.rint(((a * SX) * w) * r), np.rint(a * (s * r))}
    return {np.rint(((a * SX) * w) / SY), np.rint(a * (s / SY))}


def _ints(op, inverse):
    """The graph's arrays for `op` ("qmatmul", "qconv2d", "depthwise") over both tables: one output channel a case,
    its acc = 127 * x0 + x1 (weights 127 and 1, signed as acc) of two uint8 activations."""
    cases = [(acc, sw, b) for acc, sw, b, inv in FUSED if inv == inverse] + \
            [(acc, sw, 0.0) for acc, sw, inv in REASSOCIATED if inv == inverse]
    n = len(cases)
    x = np.zeros(2 * n, np.uint8)
    w = np.zeros((n, 2 * n), np.int8)
    for j, (acc, _, _) in enumerate(cases):
        x[2 * j], x[2 * j + 1] = divmod(abs(acc), 127)
        w[j, 2 * j], w[j, 2 * j + 1] = 127 * np.sign(acc), np.sign(acc)
    sw = np.array([c[1] for c in cases], np.float32)
    bias = np.array([c[2] for c in cases], np.float32)
    if op == "qmatmul":
        x, w = x.reshape(1, 2 * n), w.T.copy()
    elif op == "qconv2d":
        x, w = x.reshape(1, 2 * n, 1, 1), w.reshape(n, 2 * n, 1, 1)
    else:                                   # depthwise: channel j's two taps in a row
        x, w = x.reshape(1, n, 1, 2), np.stack([w[j, 2 * j:2 * j + 2] for j in range(n)]).reshape(n, 1, 1, 2)
    return x, w, bias, sw


def _graph(op, inverse):
    x, w, bias, sw = _ints(op, inverse)
    n = len(sw)
    b = Builder()
    params = [b.const(a) for a in (w, bias, SX, np.int32(0), sw, np.zeros(n, np.int32), SY, np.int32(0))]
    name = "qmatmul" if op == "qmatmul" else "qconv2d"
    attrs = dict(out_dtype="int8", inverse=inverse, **({"groups": n} if op == "depthwise" else {}))
    xin = b.graph.input(x.shape, "uint8")
    b.graph.outputs += list(b.graph.call(name, [xin] + params, **attrs))
    args = [x, w, bias, SX, np.int32(0), sw, np.zeros(n, np.int32), SY, np.int32(0)]
    return b.graph, x, get_op(name).reference(*args, **attrs)


@pytest.mark.parametrize("inverse", [False, True])
def test_the_cases_are_on_a_tie(inverse):
    """Each case's reference integer differs from its one-rounding (FMA) or a reassociated value: the kernels below
    match the reference only by rounding as it does."""
    _, _, want = _graph("qmatmul", inverse)
    fused = [c for c in FUSED if c[3] == inverse]
    for j, (acc, sw, bias, _) in enumerate(fused):
        assert _fused_value(acc, sw, bias, inverse) != want[0, j]
    for k, (acc, sw, _) in enumerate(c for c in REASSOCIATED if c[2] == inverse):
        assert _reassociated_values(acc, sw, inverse) - {want[0, len(fused) + k]}


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("op", ["qmatmul", "qconv2d", "depthwise"])
@pytest.mark.parametrize("inverse", [False, True])
def test_requantisation_rounds_as_defined(target, op, inverse):
    require_runtime(target)
    g, x, want = _graph(op, inverse)
    got = build(g, target=target)(x)
    np.testing.assert_array_equal(np.asarray(got).reshape(want.shape), want)


# dequantize(q1) + dequantize(q2) -> quantize (a residual add, one fused kernel): d1 * s1 + d2 * s2 with one product
# fused into the add (either one) gives -458, the two roundings -459
S1, S2, SR = np.float32(0.07753569632768631), np.float32(0.06170198321342468), np.float32(0.06555449217557907)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("inverse", [False, True])
def test_residual_add_rounds_as_defined(target, inverse):
    require_runtime(target)
    q = np.full((1, 1, 2, 2), -128, np.int8)
    b = Builder()
    x1, x2 = b.graph.input(q.shape, "int8"), b.graph.input(q.shape, "int8")
    d1 = b.graph.call("dequantize", [x1, b.const(S1), b.const(np.int32(118))])[0]
    d2 = b.graph.call("dequantize", [x2, b.const(S2), b.const(np.int32(50))])[0]
    s = b.graph.call("add", [d1, d2])[0]
    b.graph.outputs += list(b.graph.call("quantize", [s, b.const(SR), b.const(np.int32(0))], dtype="int32",
                                         inverse=inverse))
    p = np.float32(-246) * S1 + np.float32(-178) * S2
    want = np.rint(p * (np.float32(1) / SR) if inverse else p / SR)
    assert want == -459
    for fused in (np.float32(-246 * np.float64(S1) + np.float64(np.float32(-178) * S2)),
                  np.float32(-178 * np.float64(S2) + np.float64(np.float32(-246) * S1))):
        assert np.rint(fused * (np.float32(1) / SR) if inverse else fused / SR) == -458
    got = build(b.graph, target=target)(q, q)
    np.testing.assert_array_equal(np.asarray(got), np.full(q.shape, -459, np.int32))


@pytest.mark.parametrize("target,marker", [("llvm", None), ("opencl", "#pragma OPENCL FP_CONTRACT OFF"),
                                           ("opengl", "precise const float")])
def test_the_code_forbids_fusion(target, marker):
    """What keeps the roundings, where this host's runtimes would not fuse anyway (PoCL fuses within a statement
    only, Mesa's llvmpipe not here): LLVM IR without fast-math flags on the epilogue (an int8 matmul's only float
    ops), OpenCL's FP_CONTRACT OFF, GLSL's precise values."""
    require_runtime(target)
    src = build(_graph("qmatmul", False)[0], target=target).source
    if marker is None:
        assert "= fmul " in src and "reassoc" not in src and "contract" not in src
    else:
        assert marker in src


@pytest.mark.parametrize("target", ["llvm", "llvm -mcpu=haswell", "llvm -mcpu=x86-64"])
@pytest.mark.parametrize("dtype", ["int8", "uint8"])
def test_vector_conversion_of_specials(target, dtype):
    """The epilogue's float32 -> int conversion on x86 vectors (cvttps2dq at 4, 8 and 16 lanes): NaN, infinities and
    values past int32 as the reference (NaN the "integer indefinite" MIN, whose low byte is 0; the rest clamped)."""
    require_runtime(target)
    v = np.array([300.0, -1.0, -129.0, 200.7, -0.9, 1e10, -1e10, 3e9, 2.0 ** 31, -2.0 ** 31, np.nan, np.inf, -np.inf,
                  127.5, -128.5, 254.5], np.float32)
    x = np.tile(v, 8).reshape(1, 2, 64)
    b = Builder()
    xin = b.graph.input(x.shape, "float32")
    b.graph.outputs += list(b.graph.call("quantize", [xin, b.const(np.float32(1.0)), b.const(np.int32(0))],
                                         dtype=dtype))
    module = build(b.graph, target=target)
    assert "cvtt" in module.source
    with np.errstate(invalid="ignore"):
        want = get_op("quantize").reference(x, np.float32(1.0), np.int32(0), dtype=dtype)
    np.testing.assert_array_equal(np.asarray(module(x)), want)
