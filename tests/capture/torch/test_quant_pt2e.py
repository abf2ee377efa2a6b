"""PyTorch 2 export quantization (PT2E: torchao's prepare_pt2e / convert_pt2e with the X86 quantizer) through
torch.compile(backend="fxc") and fxc.from_torch, against PyTorch's own run of the converted model.

What is exact and what is not: the quantized_decomposed ops themselves are bit-exact (the same float32 input gives
the same uint8/int8 values, scales and zero points: test_quantized_decomposed_ops_are_bit_exact). Inside a model
the float32 value a quantize rounds comes from a conv or linear that fxc sums in another order than PyTorch (or in
int32, once the quantization pass makes them integer ops), so a value that lies within float rounding of a
rounding boundary can land one step apart: every int8 activation is PyTorch's or one step from it, on a small
fraction of the elements (`_check_activations`)."""
import warnings

import pytest
import torch
import torch.nn as nn

import fxc
from fxc.capture.torch.recorder import recording
from fxc.driver.groups import stats as build_stats
from fxc.errors import QuantizationWarning
from fxc.runtime.weights import HeldWeights
from fxc.testing.models import BertEncoder

torchao_pt2e = pytest.importorskip("torchao.quantization.pt2e.quantize_pt2e")
xiq = pytest.importorskip("torchao.quantization.pt2e.quantizer.x86_inductor_quantizer")

QD = torch.ops.quantized_decomposed


def _pt2e(model, inputs, dynamic=False, weight=None, calibrate=3, seed=0):
    """The PT2E-converted model: strict export (the non-strict one merges the calls of a reused nn.ReLU into one
    source partition, which the X86 quantizer refuses), X86 quantizer, calibrated on random inputs."""
    config = xiq.get_default_x86_inductor_quantization_config(is_dynamic=dynamic)
    if weight is not None:
        config = config.__class__(config.input_activation, config.output_activation, weight, config.bias,
                                  config.is_qat)
    quantizer = xiq.X86InductorQuantizer().set_global(config)
    with torch.no_grad():
        prepared = torchao_pt2e.prepare_pt2e(torch.export.export(model.eval(), inputs, strict=True).module(),
                                             quantizer)
        g = torch.Generator().manual_seed(seed)
        for _ in range(calibrate):
            prepared(*[torch.randn(x.shape, generator=g) if x.is_floating_point() else x for x in inputs])
        return torchao_pt2e.convert_pt2e(prepared)


def _expose_activations(q):
    """The converted model returning also every quantized activation (the outputs of the quantize ops that run at
    call time), to compare them one by one."""
    outs = [n for n in q.graph.nodes if n.op == "call_function" and n.target in (
        QD.quantize_per_tensor.default, QD.quantize_per_tensor.tensor)]
    out = next(n for n in q.graph.nodes if n.op == "output")
    first = out.args[0] if isinstance(out.args[0], (tuple, list)) else (out.args[0],)
    out.args = (tuple(first) + tuple(outs),)
    q.graph._codegen = torch.fx.graph.CodeGen()     # positional inputs, a flat tuple out (not export's pytrees)
    q.graph.lint()
    q.recompile()
    assert outs, "no quantized activations: the test would be vacuous"
    return q, len(first)


def _check_activations(actual, expected, n_float, exact_first=True, float_atol=None):
    """The int8 activations equal PyTorch's or sit one step from them, on under 1% of the elements (or on one); the
    first one (the quantized model input) exactly; the float outputs within `float_atol`."""
    for i, (a, e) in enumerate(zip(actual[n_float:], expected[n_float:])):
        assert a.dtype == e.dtype and a.shape == e.shape, (i, a.dtype, e.dtype)
        d = (a.int() - e.int()).abs()
        assert d.max() <= 1, f"activation {i}: {d.max()} steps from PyTorch's"
        assert (d > 0).sum() <= max(1, 0.01 * d.numel()), f"activation {i}: {(d > 0).sum()} of {d.numel()} differ"
        if i == 0 and exact_first:
            assert torch.equal(a, e), "the quantized input is not PyTorch's bit for bit"
    for a, e in zip(actual[:n_float], expected[:n_float]):
        torch.testing.assert_close(a, e, rtol=0, atol=float_atol)


def _run_both(q, inputs, target):
    """(PyTorch's outputs, torch.compile(backend="fxc")'s, fxc.from_torch's) of the converted model, asserting that
    nothing of it ran in eager PyTorch."""
    with torch.no_grad():
        expected = q(*inputs)
        rep = fxc.explain(q, *inputs, target=target)
        assert not rep.fallback_ops, f"fell back to eager: {dict(rep.fallback_ops)} {rep.fallback_reasons}"
        assert any(op.startswith("quantized_decomposed.") for op in rep.compiled_ops), rep.compiled_ops
        torch._dynamo.reset()
        compiled = torch.compile(q, backend="fxc", options={"target": target})(*inputs)
        ahead = fxc.from_torch(q, tuple(inputs), target=target)(*inputs)
    return expected, compiled, ahead


# -- the ops ---------------------------------------------------------------------------------------------------------
class _Ops(nn.Module):
    """Every overload PT2E writes, with PyTorch's edge cases: ties (x.5 steps), saturation at both ends, zero points
    at the ends of the range, scales of 2^-20 and 2^4, reduced ranges (0..127), per-channel int8 weights."""

    def forward(self, x, w, y):
        s1 = QD.quantize_per_tensor.default(x, 0.0390625, 128, 0, 255, torch.uint8)       # ties at x.5 steps
        s2 = QD.quantize_per_tensor.default(x, 2.0 ** -20, -128, -128, 127, torch.int8)  # saturates
        s3 = QD.quantize_per_tensor.default(x * 64, 16.0, 255, 0, 255, torch.uint8)      # scale 2^4, zp 255
        s4 = QD.quantize_per_tensor.default(x, 0.011, 3, 0, 127, torch.uint8)            # reduced range
        scale, zp = QD.choose_qparams.tensor(y, 0, 255, 2.0 ** -12, torch.uint8)
        d1 = QD.quantize_per_tensor.tensor(y, scale, zp, 0, 255, torch.uint8)
        d2 = QD.dequantize_per_tensor.tensor(d1, scale, zp, 0, 255, torch.uint8)
        d3 = QD.dequantize_per_tensor.default(s2, 2.0 ** -20, -128, -128, 127, torch.int8)
        scales = torch.tensor([0.1, 2.0 ** -20, 16.0, 0.037])
        zps = torch.tensor([0, 0, 0, 0])
        wq = QD.quantize_per_channel.default(w, scales, zps, 0, -128, 127, torch.int8)
        wd = QD.dequantize_per_channel.default(wq, scales, zps, 0, -128, 127, torch.int8)
        ss, zs = QD.choose_qparams_symmetric.tensor(w, -128, 127, 2.0 ** -12, torch.int8)
        return s1, s2, s3, s4, scale, zp, d1, d2, d3, wq, wd, ss, zs


@pytest.mark.cpu_targets
def test_quantized_decomposed_ops_are_bit_exact(target):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(2, 3, 8, 8, generator=g) * 3
    x.view(-1)[:6] = torch.tensor([0.01953125, 0.05859375, -0.01953125, 1e9, -1e9, 0.0])  # ties (0.5 and 1.5 steps)
    w = torch.randn(4, 3, 3, 3, generator=g) * 20
    y = torch.randn(2, 3, 8, 8, generator=g) * 3
    with torch.no_grad():
        expected = _Ops()(x, w, y)
        rep = fxc.explain(_Ops(), x, w, y, target=target)
        assert not rep.fallback_ops, f"fell back to eager: {dict(rep.fallback_ops)} {rep.fallback_reasons}"
        for actual in (torch.compile(_Ops(), backend="fxc", options={"target": target})(x, w, y),
                       fxc.from_torch(_Ops(), (x, w, y), target=target)(x, w, y)):
            for i, (a, e) in enumerate(zip(actual, expected)):
                assert a.dtype == e.dtype and a.shape == e.shape, (i, a.dtype, e.dtype, a.shape, e.shape)
                assert torch.equal(a, e), f"output {i}: {(a.double() - e.double()).abs().max()} from PyTorch's"


def _dynamic_quantize(x):
    scale, zp = QD.choose_qparams.tensor(x, 0, 255, 2.0 ** -12, torch.uint8)
    return QD.quantize_per_tensor.tensor(x, scale, zp, 0, 255, torch.uint8)


def test_a_run_time_scale_multiplies_by_its_reciprocal_at_a_tie(target):
    """PyTorch multiplies by float32(1 / scale): at a tie (1e9 * (1 / 7843137.5) is 127.5, 1e9 / 7843137.5 is
    127.49999) a division would land one step off."""
    x = torch.tensor([1e9, -1e9, 1.0, 3e8])
    with torch.no_grad():
        assert torch.equal(fxc.from_torch(_dynamic_quantize, (x,), target=target)(x), _dynamic_quantize(x))


# -- static quantization ---------------------------------------------------------------------------------------------
class _ResBlockNet(nn.Module):
    """A ResNet-style net: a stem conv, a basic block (conv-bn-relu, conv-bn, residual add, relu), a strided
    block with a 1x1 downsample, pooling and a linear head."""

    def __init__(self):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1, bias=False), nn.BatchNorm2d(16), nn.ReLU())
        self.c1, self.b1 = nn.Conv2d(16, 16, 3, padding=1, bias=False), nn.BatchNorm2d(16)
        self.c2, self.b2 = nn.Conv2d(16, 16, 3, padding=1, bias=False), nn.BatchNorm2d(16)
        self.c3, self.b3 = nn.Conv2d(16, 32, 3, stride=2, padding=1, bias=False), nn.BatchNorm2d(32)
        self.down = nn.Sequential(nn.Conv2d(16, 32, 1, stride=2, bias=False), nn.BatchNorm2d(32))
        self.relu1, self.relu2, self.relu3 = nn.ReLU(), nn.ReLU(), nn.ReLU()
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(32, 10)

    def forward(self, x):
        x = self.stem(x)
        y = self.relu1(self.b1(self.c1(x)))
        x = self.relu2(self.b2(self.c2(y)) + x)
        x = self.relu3(self.b3(self.c3(x)) + self.down(x))
        return self.fc(torch.flatten(self.pool(x), 1))


def test_pt2e_through_torch_compile_builds_and_packs_once(target, monkeypatch):
    """The converted model's int8 weights and their zero points are plain tensor attributes, so graph inputs of
    torch.compile's graph: the zero points are built in (checked when a weight changes), the convs and the linear
    take the packed integer form, and after the first call no call builds or packs a weight again (issue 43: a
    PT2E ResNet-18 cost ~2 s a call in the general integer form)."""
    torch.manual_seed(0)
    x = torch.randn(1, 3, 16, 16)
    q = _pt2e(_ResBlockNet(), (x,))
    packs = []
    hold = HeldWeights.hold
    monkeypatch.setattr(HeldWeights, "hold", lambda self, *a: (packs.append(a), hold(self, *a))[1])
    with torch.no_grad(), recording() as rec:
        expected = q(x)
        compiled = torch.compile(q, backend="fxc", options={"target": target})
        outs = [compiled(x)]
        builds, packed = build_stats["builds"], len(packs)
        outs += [compiled(x) for _ in range(4)]
    assert build_stats["builds"] == builds and len(packs) == packed == 1, (build_stats, len(packs))
    kernels = [str(k) for k in rec.kernels]
    assert any("packed_i8" in k for k in kernels) and not any("qconv2d" in k or "qmatmul" in k for k in kernels), \
        kernels
    scale = expected.abs().max().item()
    for out in outs:
        torch.testing.assert_close(out, expected, rtol=0, atol=0.05 * scale)


class _DepthwiseNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.pw = nn.Conv2d(3, 16, 1)
        self.dw = nn.Conv2d(16, 16, 3, padding=1, groups=16)
        self.project = nn.Conv2d(16, 8, 1)
        self.act = nn.ReLU6()

    def forward(self, x):
        return self.project(self.act(self.dw(self.act(self.pw(x)))))


def test_pt2e_depthwise_through_torch_compile_takes_the_fast_form(target):
    """The depthwise convs' weight scales are built in with their zero points, so torch.compile's graph gets the
    same depthwise form as from_torch (not the general integer loop, ~5x slower on MobileNetV2)."""
    torch.manual_seed(0)
    x = torch.randn(1, 3, 12, 12)
    q = _pt2e(_DepthwiseNet(), (x,))
    with torch.no_grad(), recording() as rec:
        expected = q(x)
        out = torch.compile(q, backend="fxc", options={"target": target})(x)
    kernels = [str(k) for k in rec.kernels]
    assert not any("qconv2d" in k for k in kernels), kernels
    torch.testing.assert_close(out, expected, rtol=0, atol=0.05 * expected.abs().max().item())


def _per_tensor_weights():
    from torchao.quantization.pt2e import MinMaxObserver
    from torchao.quantization.pt2e.quantizer import QuantizationSpec
    return QuantizationSpec(dtype=torch.int8, quant_min=-128, quant_max=127, qscheme=torch.per_tensor_symmetric,
                            is_dynamic=False, observer_or_fake_quant_ctr=MinMaxObserver.with_args(eps=2 ** -12))


@pytest.mark.parametrize("weights", ["per_channel", "per_tensor"])
def test_pt2e_static_resnet_block(weights, target):
    torch.manual_seed(0)
    x = torch.randn(1, 3, 16, 16)
    q = _pt2e(_ResBlockNet(), (x,), weight=_per_tensor_weights() if weights == "per_tensor" else None)
    channel = [n for n in q.graph.nodes if n.target == QD.dequantize_per_channel.default]
    assert bool(channel) == (weights == "per_channel"), "the quantizer did not make the weights asked for"
    q, n_float = _expose_activations(q)
    expected, compiled, ahead = _run_both(q, (x,), target)
    scale = expected[0].abs().max().item()
    for actual in (compiled, ahead):
        _check_activations(actual, expected, n_float, float_atol=0.05 * scale)


class _Mlp(nn.Module):
    def __init__(self):
        super().__init__()
        self.l1, self.l2, self.l3 = nn.Linear(24, 48), nn.Linear(48, 48), nn.Linear(48, 8)

    def forward(self, x):
        return self.l3(torch.relu(self.l2(torch.relu(self.l1(x)))))


def test_pt2e_static_linear(target):
    torch.manual_seed(1)
    x = torch.randn(4, 24)
    q, n_float = _expose_activations(_pt2e(_Mlp(), (x,)))
    expected, compiled, ahead = _run_both(q, (x,), target)
    scale = expected[0].abs().max().item()
    for actual in (compiled, ahead):
        _check_activations(actual, expected, n_float, float_atol=0.05 * scale)


# -- dynamic quantization --------------------------------------------------------------------------------------------
def test_pt2e_dynamic_linear_small_transformer(target):
    """The repo's BERT encoder, small, with dynamically quantized linears: per call choose_qparams of each linear's
    input (float64 scale, int64 zero point as PyTorch returns them), uint8 activations, per-channel int8 weights."""
    torch.manual_seed(2)
    model = BertEncoder(vocab=64, hidden=32, layers=1, heads=2, intermediate=64, max_len=16)
    ids, mask = torch.randint(0, 64, (1, 12)), torch.ones(1, 12, dtype=torch.long)
    mask[0, -3:] = 0
    q = _pt2e(model, (ids, mask), dynamic=True)
    assert any(n.target == QD.choose_qparams.tensor for n in q.graph.nodes)
    q, n_float = _expose_activations(q)
    expected, compiled, ahead = _run_both(q, (ids, mask), target)
    for actual in (compiled, ahead):
        # the first linear's input is a LayerNorm's output (fxc's float32 sums): its min/max, hence its scale,
        # may differ from PyTorch's in the last bit, so no activation is required bit-exact here
        _check_activations(actual, expected, n_float, exact_first=False, float_atol=0.05)


# -- what fxc computes in float ----------------------------------------------------------------------------------------
class _Int4Linear(nn.Module):
    """torchao's int4 weight form ("8da4w"): int4 values in int8 storage, one scale and zero point per group of 16
    columns, dequantized by quantized_decomposed.dequantize_per_channel_group before a float linear."""

    def __init__(self):
        super().__init__()
        g = torch.Generator().manual_seed(3)
        self.register_buffer("w", torch.randint(-8, 8, (8, 32), generator=g, dtype=torch.int8))
        self.register_buffer("scales", torch.rand(16, generator=g) * 0.1 + 0.01)
        self.register_buffer("zeros", torch.randint(-2, 3, (16,), generator=g, dtype=torch.int32))

    def forward(self, x):
        w = QD.dequantize_per_channel_group(self.w, self.scales, self.zeros, -8, 7, torch.int8, 16, torch.float32)
        return torch.nn.functional.linear(x, w)


def _said(caught, *words):
    """The QuantizationWarnings caught that name every one of `words`."""
    return [str(w.message) for w in caught if issubclass(w.category, QuantizationWarning)
            and all(word in str(w.message) for word in words)]


def test_per_group_int4_weights_compute_in_float_with_one_warning(target):
    from fxc.capture.torch import recorder
    recorder._warned.clear()
    x = torch.randn(3, 32)
    with torch.no_grad(), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        expected = _Int4Linear()(x)
        rep = fxc.explain(_Int4Linear(), x, target=target)
        torch._dynamo.reset()
        actual = torch.compile(_Int4Linear(), backend="fxc", options={"target": target})(x)
    assert not rep.fallback_ops, f"fell back to eager: {dict(rep.fallback_ops)}"
    torch.testing.assert_close(actual, expected, rtol=1e-5, atol=1e-5)
    assert len(_said(caught)) == 1 and _said(caught, "per-group", "16"), [str(w.message) for w in caught]


class _Int16(nn.Module):
    def forward(self, x):
        q = QD.quantize_per_tensor.default(x, 0.001, 3, -32768, 32767, torch.int16)
        return q, QD.dequantize_per_tensor.default(q, 0.001, 3, -32768, 32767, torch.int16)


def test_int16_values_and_a_scale_that_is_no_float32_value_are_exact(target):
    """int16 values, and a Python scale (0.001) whose float32 reciprocal no float32 scale has: PyTorch's steps."""
    x = torch.randn(5, 7) * 40
    with torch.no_grad():
        expected = _Int16()(x)
        actual = fxc.from_torch(_Int16(), (x,), target=target)(x)
    for a, e in zip(actual, expected):
        assert a.dtype == e.dtype and torch.equal(a, e)


class _AsymmetricConv(nn.Module):
    """A converted graph's conv as PT2E writes it, but with asymmetric int8 weights (a zero point per output
    channel; the X86 quantizer itself only makes symmetric ones)."""

    def __init__(self):
        super().__init__()
        g = torch.Generator().manual_seed(4)
        self.register_buffer("w", torch.randint(-128, 128, (8, 3, 3, 3), generator=g, dtype=torch.int8))
        self.register_buffer("scales", torch.rand(8, generator=g) * 0.01 + 0.001)
        self.register_buffer("zeros", torch.randint(-20, 20, (8,), generator=g))
        self.register_buffer("bias", torch.randn(8, generator=g))

    def forward(self, x):
        x = QD.dequantize_per_tensor.default(QD.quantize_per_tensor.default(x, 0.02, 128, 0, 255, torch.uint8),
                                             0.02, 128, 0, 255, torch.uint8)
        w = QD.dequantize_per_channel.default(self.w, self.scales, self.zeros, 0, -128, 127, torch.int8)
        y = torch.relu(torch.nn.functional.conv2d(x, w, self.bias, padding=1))
        return QD.quantize_per_tensor.default(y, 0.05, 0, 0, 255, torch.uint8)


def test_weight_zero_points_compute_in_float_with_one_warning(target):
    """Asymmetric int8 weights (which VNNI's u8 x s8 products cannot take directly): the conv computes in float as
    PyTorch's dequantize -> conv defines it, with one warning naming the weight zero points."""
    x = torch.randn(1, 3, 10, 10)
    with torch.no_grad(), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        expected = _AsymmetricConv()(x)
        actual = fxc.from_torch(_AsymmetricConv(), (x,), target=target)(x)
        said = _said(caught)
        compiled = torch.compile(_AsymmetricConv(), backend="fxc", options={"target": target})(x)
    _check_activations((actual,), (expected,), 0, exact_first=False)
    assert len(said) == 1 and _said(caught, "zero point"), [str(w.message) for w in caught]
    _check_activations((compiled,), (expected,), 0, exact_first=False)


@pytest.mark.parametrize("qparam", ["zeros", "scales"])
def test_a_changed_weight_qparam_builds_again(qparam, target):
    """Through torch.compile the weights' zero points and scales are built in as constants: one changed in place (a
    weight, not a guarded input) is seen at the next call, which builds again; the results follow PyTorch's."""
    x = torch.randn(1, 3, 10, 10)
    m = _AsymmetricConv()
    compiled = torch.compile(m, backend="fxc", options={"target": target})
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore", QuantizationWarning)
        _check_activations((compiled(x),), (m(x),), 0, exact_first=False)
        builds = build_stats["builds"]
        getattr(m, qparam).add_(7) if qparam == "zeros" else m.scales.mul_(1.5)
        _check_activations((compiled(x),), (m(x),), 0, exact_first=False)
        assert build_stats["builds"] == builds + 1
        _check_activations((compiled(x),), (m(x),), 0, exact_first=False)
        assert build_stats["builds"] == builds + 1


def test_float64_per_channel_scales_run_in_eager_not_wrong(target):
    """Per-channel scales of float64 make PyTorch compute in float64, which fxc's quantize does not: that op runs in
    eager PyTorch, and the result is PyTorch's."""
    scales = torch.tensor([0.1, 0.3], dtype=torch.float64)

    def f(x):
        return QD.quantize_per_channel.default(x, scales, torch.zeros(2, dtype=torch.long), 1, -128, 127, torch.int8)
    x = torch.randn(3, 2) * 10
    rep = fxc.explain(f, x, target=target)
    assert "quantized_decomposed.quantize_per_channel.default" in rep.fallback_ops, rep
    assert torch.equal(torch.compile(f, backend="fxc", options={"target": target})(x), f(x))
