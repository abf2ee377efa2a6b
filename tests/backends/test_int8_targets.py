"""int8 / uint8 tensors and int32 arithmetic on every target (issue 43, the generic integer form): 8-bit storage
(bytes packed in words on GL and WebGPU, int32 texels on WebGL), wrap-around of 8- and 32-bit arithmetic, round half
to even, saturating casts, integer division, max pooling of int8 / uint8 (a channel of zeros: the padding must not
win) and int32 matmuls of widened int8 inputs, exactly equal to numpy; a chain of torch ops on int8 tensors through
torch.compile, equal to eager; and a device without an integer capability (Caps.int8_storage, Caps.int32_ops)
refused with a LoweringError naming it (torch.compile then runs the graph in eager; `fxc devices` says so), or on the
browser targets run as wasm kernels in the same page."""
import dataclasses
import logging

import numpy as np
import pytest
import torch

import fxc.capture.torch.recorder
from fxc.backends import fill
from fxc.commands.devices import caps_text
from fxc.driver.build import build
from fxc.errors import LoweringError
from fxc.relay_like.builder import Builder

rng = np.random.default_rng(43)
I8 = rng.integers(-128, 128, (3, 37)).astype(np.int8)
J8 = np.concatenate([rng.integers(-128, 128, (2, 37)), np.full((1, 37), -128)]).astype(np.int8)
U8 = rng.integers(0, 256, (3, 37)).astype(np.uint8)
V8 = np.concatenate([rng.integers(0, 256, (2, 37)), np.full((1, 37), 255)]).astype(np.uint8)
P8 = np.concatenate([rng.integers(0, 256, (1, 3, 7, 9)), np.zeros((1, 1, 7, 9))], 1).astype(np.uint8)  # + all 0
BIG = np.array([[2 ** 31 - 1, -2 ** 31, 100000, -7, 46341, 65536, 7, -2 ** 31]], np.int32)
DIV = np.array([[2, 3, 100000, 2, 46341, 65536, -2, -1]], np.int32)
HALVES = np.array([[0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 3.49999, 1e9, -1e9, 254.5, 255.5, -128.5, 126.5, 127.5, -0.0,
                    -129.5]], np.float32)


def _cast(b, x, dtype):
    return b.call("cast", [x], dtype=dtype)


def _quantize(b, x, lo, hi, dtype):
    """clamp(round_half_even(x), lo, hi) as `dtype`: the saturating float -> 8-bit cast of a requantization."""
    return _cast(b, b.call("clamp", [b.call("round", [x])], lo=lo, hi=hi), dtype)


def _requant(b, acc):
    """An int32 accumulator requantized to int8: clamp(round(acc * 0.37) + 3, -128, 127)."""
    x = b.call("add", [b.call("round", [b.call("mul", [_cast(b, acc, "float32"), b.scalar(0.37, "float32")])]),
                       b.scalar(3.0, "float32")])
    return _cast(b, b.call("clamp", [x], lo=-128.0, hi=127.0), "int8")


def _max_pool(x, low):
    """3x3 max pooling, stride 2, padding 1 (padding never wins: below every value)."""
    p = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)), constant_values=low)
    n, c, h, w = x.shape
    oh, ow = (h - 1) // 2 + 1, (w - 1) // 2 + 1
    return np.max([p[:, :, i:i + 2 * oh - 1:2, j:j + 2 * ow - 1:2] for i in range(3) for j in range(3)], axis=0)


def _wrapping(fn, *args):
    """numpy's result of fn, which wraps on overflow (-2**31 // -1 is -2**31), without its warning."""
    with np.errstate(over="ignore"):
        return fn(*args)


def _wide(x):
    return x.astype(np.int32)


# name -> (graph fn(builder, *inputs), inputs, numpy reference); every result must equal numpy's bit for bit
CASES = {
    "cast_i8_i32": (lambda b, x: _cast(b, x, "int32"), [I8], _wide),
    "cast_u8_f32": (lambda b, x: _cast(b, x, "float32"), [U8], lambda x: x.astype(np.float32)),
    "neg_i8": (lambda b, x: b.call("neg", [x]), [J8], lambda x: -x),
    "add_i8": (lambda b, x, y: b.call("add", [x, y]), [I8, J8], lambda x, y: x + y),
    "mul_i8": (lambda b, x, y: b.call("mul", [x, y]), [I8, J8], lambda x, y: x * y),
    "sub_u8": (lambda b, x, y: b.call("sub", [x, y]), [U8, V8], lambda x, y: x - y),
    "mul_u8": (lambda b, x, y: b.call("mul", [x, y]), [U8, V8], lambda x, y: x * y),
    "max_u8": (lambda b, x, y: b.call("maximum", [x, y]), [U8, V8], np.maximum),
    "min_i8": (lambda b, x, y: b.call("minimum", [x, y]), [I8, J8], np.minimum),
    "gt_u8": (lambda b, x, y: b.call("gt", [x, y]), [U8, V8], lambda x, y: x > y),
    "xor_i8": (lambda b, x, y: b.call("bitwise_xor", [x, y]), [I8, J8], lambda x, y: x ^ y),
    "mul_i32": (lambda b, x, y: b.call("mul", [x, y]), [BIG, DIV], lambda x, y: x * y),
    "add_i32": (lambda b, x, y: b.call("add", [x, y]), [BIG, BIG], lambda x, y: x + y),
    "truncdiv_i32": (lambda b, x, y: b.call("truncdiv", [x, y]), [BIG, DIV],
                     lambda x, y: (np.trunc(x.astype(np.float64) / y)).astype(np.int64).astype(np.int32)),
    "floordiv_i32": (lambda b, x, y: b.call("floordiv", [x, y]), [BIG, DIV], lambda x, y: _wrapping(np.floor_divide,
                                                                                                   x, y)),
    "round_f32": (lambda b, x: b.call("round", [x]), [HALVES], np.round),
    "quantize_u8": (lambda b, x: _quantize(b, x, 0.0, 255.0, "uint8"), [HALVES],
                    lambda x: np.clip(np.round(x), 0, 255).astype(np.uint8)),
    "quantize_i8": (lambda b, x: _quantize(b, x, -128.0, 127.0, "int8"), [HALVES],
                    lambda x: np.clip(np.round(x), -128, 127).astype(np.int8)),
    "clamp_i32_u8": (lambda b, x: _cast(b, b.call("clamp", [x], lo=0, hi=255), "uint8"), [BIG],
                     lambda x: np.clip(x, 0, 255).astype(np.uint8)),
    "wrap_i32_i8": (lambda b, x: _cast(b, x, "int8"), [BIG], lambda x: x.astype(np.int8)),
    "wrap_i32_u8": (lambda b, x: _cast(b, x, "uint8"), [BIG], lambda x: x.astype(np.uint8)),
    "max_pool_u8": (lambda b, x: b.call("max_pool2d", [x], kernel=(3, 3), stride=(2, 2), padding=(1, 1)), [P8],
                    lambda x: _max_pool(x, 0)),
    "max_pool_i8": (lambda b, x: b.call("max_pool2d", [x], kernel=(3, 3), stride=(2, 2), padding=(1, 1)),
                    [P8.view(np.int8)], lambda x: _max_pool(x, -128)),
    "matmul_i8": (lambda b, x, y: b.call("matmul", [_cast(b, x, "int32"), _cast(b, y, "int32")], trans_b=True),
                  [I8, J8], lambda x, y: _wide(x) @ _wide(y).T),
    "matmul_u8_zp_requant": (lambda b, x, y: _requant(b, b.call("matmul", [
        b.call("sub", [_cast(b, x, "int32"), b.scalar(128, "int32")]), _cast(b, y, "int32")], trans_b=True)),
        [V8, J8], lambda x, y: np.clip(np.round((_wide(x) - 128) @ _wide(y).T * np.float32(0.37)) + 3, -128,
                                       127).astype(np.int8)),
}


def _graph(fn, arrays):
    b = Builder()
    b.graph.outputs = [fn(b, *(b.graph.input(a.shape, str(a.dtype)) for a in arrays))]
    return b.graph


@pytest.mark.all_targets
def test_int8_and_int32_arithmetic_equal_numpy(target):
    """Every case on `target` equals numpy exactly (each its own build: a wrong case is named, not masked)."""
    wrong = []
    for name, (fn, arrays, ref) in CASES.items():
        got = build(_graph(fn, arrays), target=target)(*arrays)
        want = ref(*arrays)
        if got.dtype != want.dtype or not np.array_equal(got, want):
            wrong.append(f"{name}: {got.dtype} {got.ravel()[:8]} != {want.dtype} {want.ravel()[:8]}")
    assert not wrong, "\n".join(wrong)


def _without(target: str, **caps):
    t = fill(target)
    return t.with_caps(dataclasses.replace(t.caps, **caps))


NEEDS = {"int8_storage": ("wrap_i32_i8", "stores 8-bit elements"), "int32_ops": ("mul_i32", "computes int32 mul")}


@pytest.mark.targets("opencl", "opengl")
@pytest.mark.parametrize("cap", sorted(NEEDS))
def test_device_without_an_integer_cap_refuses(target, cap):
    """A device whose Caps lacks the capability refuses the kernel that needs it, naming the capability; a graph
    that does not need it still builds there."""
    t = _without(target, **{cap: False})
    name, says = NEEDS[cap]
    fn, arrays, _ = CASES[name]
    with pytest.raises(LoweringError, match=f"needs Caps.{cap} \\(it {says}"):
        build(_graph(fn, arrays), target=t)
    fn, arrays, ref = CASES["round_f32"]
    np.testing.assert_array_equal(build(_graph(fn, arrays), target=t)(*arrays), ref(*arrays))
    assert "int8 kernels refused" in caps_text(t) and "int8 kernels refused" not in caps_text(fill(target))


@pytest.mark.targets("webgl", "webgpu")
@pytest.mark.parametrize("cap", sorted(NEEDS))
def test_browser_without_an_integer_cap_runs_wasm_in_the_page(target, cap):
    """On a browser target the refused group runs as wasm kernels in the same page: still exact."""
    name, _ = NEEDS[cap]
    fn, arrays, ref = CASES[name]
    module = build(_graph(fn, arrays), target=_without(target, **{cap: False}))
    assert any("[wasm in the page:" in line and f"Caps.{cap}" in line for line in module.kernels), module.kernels
    np.testing.assert_array_equal(module(*arrays), ref(*arrays))


def test_torch_compile_falls_back_where_the_device_lacks_8bit_storage(caplog):
    """torch.compile on an OpenCL device without byte stores: the int8 graph runs in eager PyTorch (the result is
    eager's), and the report names the capability."""
    from tests.targets import require_runtime
    require_runtime("opencl")

    def f(x, y):
        return (x.to(torch.int32) * y.to(torch.int32)).clamp(-128, 127).to(torch.int8)

    x, y = torch.from_numpy(I8), torch.from_numpy(J8)
    fxc.capture.torch.recorder._recorders.append(rep := fxc.capture.torch.recorder.Explanation())
    try:
        with caplog.at_level(logging.WARNING):
            got = torch.compile(f, backend="fxc", options=dict(target=_without("opencl", int8_storage=False)))(x, y)
    finally:
        fxc.capture.torch.recorder._recorders.remove(rep)
    torch.testing.assert_close(got, f(x, y), rtol=0, atol=0)
    assert "Caps.int8_storage" in str(rep), str(rep)


@pytest.mark.all_targets
def test_torch_int8_arithmetic_through_torch_compile(target):
    """A quantize -> int32 arithmetic -> requantize -> dequantize chain of plain torch ops on int8 / uint8 tensors,
    compiled with dynamic sizes: every op compiled (none in eager) and every size equal to eager bit for bit."""
    def f(x, s):
        q = torch.clamp(torch.round(x / s) + 3, -128, 127).to(torch.int8)
        y = (q.to(torch.int32) * 3 - 7).clamp(0, 255).to(torch.uint8)
        return q, y, (y.to(torch.float32) - 5) * 0.25

    torch.manual_seed(43)
    fxc.capture.torch.recorder._recorders.append(rep := fxc.capture.torch.recorder.Explanation())
    try:
        g = torch.compile(f, backend="fxc", dynamic=True, options=dict(target=target))
        for n in (3, 8, 13):
            x, s = torch.randn(n, 7) * 50, torch.tensor(0.37)
            for got, want in zip(g(x, s), f(x, s)):
                torch.testing.assert_close(got, want, rtol=0, atol=0)
    finally:
        fxc.capture.torch.recorder._recorders.remove(rep)
    assert not rep.fallback_ops, str(rep)
