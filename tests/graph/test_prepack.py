"""The pack_weights pass and the cached weight-prepack step, against eager PyTorch and numpy references: live weights
repacked only when they change (in-place writes, writes through .data, non-contiguous weights, copies sharing a build,
inference tensors), weight-only math hoisted into the prepack step, frozen weights packed at compile time."""
import numpy as np
import torch

import fxc
from fxc.driver.build import build
from fxc.ops.registry import all_ops, get_op
from fxc.relay_like.context import PassContext
from fxc.relay_like.graph import Graph
from fxc.relay_like.passes import pack_weights
from tests.helpers import ConvNet, assert_close_np

all_ops()
RNG = np.random.default_rng(0)


def rand(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


def test_pack_weights_pass_rewrites_conv_and_matmul():
    """before: conv2d(x, w), matmul(a, b^T); expected: conv2d_packed(x, pack_lanes(w)),
    matmul_packed(a, pack_lanes(b)) with the original output Values."""
    g = Graph()
    x, w = g.input((1, 8, 16, 16), "float32"), g.input((40, 8, 3, 3), "float32")
    a, b = g.input((5, 7), "float32"), g.input((20, 7), "float32")
    y1 = g.call1("conv2d", [x, w], stride=(1, 1), dilation=(1, 1), groups=1)
    y2 = g.call1("matmul", [a, b], trans_b=True)
    g.outputs = [y1, y2]
    avx512 = PassContext(fxc.target.Target.parse("llvm -mcpu=skylake-avx512"))     # 16 lanes, 32 registers: any host
    g = pack_weights(g, avx512)
    assert [n.op for n in g.nodes] == ["pack_lanes", "conv2d_packed", "pack_lanes", "matmul_packed"]
    pw, conv, pb, mm = g.nodes
    assert pw.inputs == [w] and pw.attrs == dict(axis=0, block_pos=0, blocks=4, lanes=16)
    assert conv.inputs == [x, pw.outputs[0]] and conv.attrs["out_channels"] == 40 and conv.attrs["nv"] == 2
    assert pb.inputs == [b] and pb.attrs == dict(axis=0, block_pos=0, blocks=2, lanes=16)
    assert mm.attrs["n"] == 20 and g.outputs == [y1, y2] and y1.node is conv and y2.node is mm
    # float64 and grouped convs keep their generic form
    g2 = Graph()
    x2, w2 = g2.input((1, 4, 9, 9), "float64"), g2.input((4, 1, 3, 3), "float64")
    g2.outputs = [g2.call1("conv2d", [x2, w2], stride=(1, 1), dilation=(1, 1), groups=4)]
    assert [n.op for n in pack_weights(g2, avx512).nodes] == ["conv2d"]


def _count_prepacks(monkeypatch):
    from fxc.runtime.cpu import module as rt
    calls = []
    real = rt.Module.run_prepared

    def spy(self, ins, outs, token=None):
        held = (self._workspace_for(token) if self.prepack_inputs else self._ws).held()
        before = held.token, held.fingerprint
        real(self, ins, outs, token)
        if self.prepack_inputs and (held.token is not before[0] or held.fingerprint != before[1]):
            calls.append(1)
    monkeypatch.setattr(rt.Module, "run_prepared", spy)
    return calls


def test_prepack_cached_until_weights_change(monkeypatch):
    calls = _count_prepacks(monkeypatch)
    torch.manual_seed(0)
    net, x = ConvNet(), torch.randn(1, 3, 10, 11)
    f = torch.compile(net, backend="fxc")
    with torch.no_grad():
        for _ in range(3):
            torch.testing.assert_close(f(x), net(x), rtol=1e-4, atol=1e-5)
        assert len(calls) == 1                      # packed once for three calls
        net.conv.weight.mul_(-2.0)                  # in-place update: version bump -> repack
        torch.testing.assert_close(f(x), net(x), rtol=1e-4, atol=1e-5)
        assert len(calls) == 2
        net.load_state_dict(ConvNet().state_dict())    # copy_ into the parameters
        torch.testing.assert_close(f(x), net(x), rtol=1e-4, atol=1e-5)


def test_instances_sharing_a_build_keep_their_own_packing(monkeypatch):
    """Dynamo runs one compiled graph for every instance of a class, so two copies of a network share one fxc build:
    each copy's weights stay packed in a workspace of their own (calls alternating between them repack nothing; a
    repack per call made MobileNetV2 8.3 ms instead of 5.8), and an update of one copy's weights is still seen."""
    calls = _count_prepacks(monkeypatch)
    torch.manual_seed(0)
    nets, x = [ConvNet(), ConvNet()], torch.randn(1, 3, 10, 11)
    fs = [torch.compile(n, backend="fxc") for n in nets]
    with torch.no_grad():
        for _ in range(3):
            for net, f in zip(nets, fs):
                torch.testing.assert_close(f(x), net(x), rtol=1e-4, atol=1e-5)
        assert len(calls) == 2                      # one packing per copy, kept
        nets[1].conv.weight.mul_(-2.0)
        for net, f in zip(nets, fs):
            torch.testing.assert_close(f(x), net(x), rtol=1e-4, atol=1e-5)
        assert len(calls) == 3                      # the updated copy alone repacked


def test_writes_through_data_are_seen(monkeypatch):
    """p.data.copy_(w) writes the parameter's memory without bumping its version counter: the cached packing
    is redone because a sample of the packed inputs' words changed (Module.run_prepared), not served stale."""
    calls = _count_prepacks(monkeypatch)
    torch.manual_seed(0)
    net, x = ConvNet(), torch.randn(1, 3, 10, 11)
    f = torch.compile(net, backend="fxc")
    with torch.no_grad():
        torch.testing.assert_close(f(x), net(x), rtol=1e-4, atol=1e-5)
        version = net.fc.weight._version
        net.fc.weight.data.copy_(torch.randn_like(net.fc.weight))
        net.conv.weight.data.mul_(-0.5)
        assert net.fc.weight._version == version      # the version counter did not see it
        torch.testing.assert_close(f(x), net(x), rtol=1e-4, atol=1e-5)
        assert len(calls) == 2
        torch.testing.assert_close(f(x), net(x), rtol=1e-4, atol=1e-5)
        assert len(calls) == 2                          # unchanged weights: the packing is reused


def test_writes_through_data_of_non_contiguous_weights_are_seen(monkeypatch):
    """A channels_last model's conv weights are not contiguous: fxc reads them through contiguous copies, which a
    write through .data left stale (max error 1.8) until the copies' sources are sampled too (runtime Sample)."""
    calls = _count_prepacks(monkeypatch)
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Conv2d(8, 16, 3, padding=1), torch.nn.ReLU(), torch.nn.Conv2d(16, 4, 1))
    net = net.eval().to(memory_format=torch.channels_last)
    assert not net[0].weight.is_contiguous()
    x = torch.randn(1, 8, 12, 12)
    f = torch.compile(net, backend="fxc")
    with torch.no_grad():
        torch.testing.assert_close(f(x), net(x), rtol=1e-4, atol=1e-5)
        torch.testing.assert_close(f(x), net(x), rtol=1e-4, atol=1e-5)
        assert len(calls) == 1                          # unchanged: the copies and the packing are reused
        net[0].weight.data.mul_(-2.0)
        torch.testing.assert_close(f(x), net(x), rtol=1e-4, atol=1e-5)
        assert len(calls) == 2


def test_constant_weights_are_packed_at_compile_time():
    """Frozen weights are graph constants: fold_constants runs pack_lanes' reference at compile time, so
    the module has no pack kernel and no prepack step."""
    x, w, b = rand(1, 8, 12, 12), rand(40, 8, 3, 3), rand(20, 40)
    g = Graph()
    xv = g.input(x.shape, "float32", "x")
    y = g.call1("conv2d", [xv, g.const(w)], stride=(1, 1), dilation=(1, 1), groups=1)
    y = g.call1("matmul", [g.call1("reshape", [y], shape=(40, 100)), g.const(b)], trans_a=True, trans_b=True)
    g.outputs = [y]
    m = build(g)
    assert not any("pack_lanes" in k for k in m.kernels) and m.prepack_inputs == []
    conv = get_op("conv2d").reference(x, w, stride=(1, 1), dilation=(1, 1), groups=1)
    ref = conv.reshape(40, 100).T.astype(np.float64) @ b.T.astype(np.float64)
    assert_close_np(m(x), ref.astype(np.float32))


class _ConvBN(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 16, 3, padding=1, bias=False)
        self.bn = torch.nn.BatchNorm2d(16)

    def forward(self, x):
        return torch.relu(self.bn(self.conv(x)))


def _conv_bn():
    torch.manual_seed(0)
    net = _ConvBN().eval()
    net.bn.running_mean.uniform_(-1, 1)
    net.bn.running_var.uniform_(0.5, 2)
    net.bn.weight.data.uniform_(0.5, 1.5)
    return net, torch.randn(1, 3, 9, 10)


def test_weight_only_math_is_hoisted_into_prepack(monkeypatch):
    """Batch-norm scale and shift computed from parameters/buffers run in the cached prepack step, the scale
    folded into the packed weight (fold_scale_axis), so the per-call kernels are those of a frozen model
    (conv + add + relu) and no kernel reads a weight twice; the results still follow in-place writes to the
    running statistics."""
    calls = _count_prepacks(monkeypatch)
    net, x = _conv_bn()
    rec = fxc.explain(net, x)
    main = [k.split(": ", 1)[1] for k in rec.kernels if "[prepack]" not in k]
    assert any(k.startswith("conv2d_packed+add+relu ") for k in main), rec.kernels
    assert any("rsqrt" in k and "[prepack]" in k for k in rec.kernels), rec.kernels
    assert any("mul+pack_lanes" in k and "[prepack]" in k for k in rec.kernels), rec.kernels
    frozen = fxc.explain(net, x, freeze=True)
    assert not any("[prepack]" in k for k in frozen.kernels), frozen.kernels
    assert main == [k.split(": ", 1)[1] for k in frozen.kernels]
    calls.clear()
    f = torch.compile(net, backend="fxc")
    with torch.no_grad():
        for _ in range(3):
            torch.testing.assert_close(f(x), net(x), rtol=1e-4, atol=1e-5)
        assert len(calls) == 1
        net.bn.running_var.mul_(4.0)                # a buffer written in place: the scale is recomputed
        torch.testing.assert_close(f(x), net(x), rtol=1e-4, atol=1e-5)
        assert len(calls) == 2
        net.bn.bias.data = torch.randn(16)          # a new tensor behind the parameter: recomputed too
        torch.testing.assert_close(f(x), net(x), rtol=1e-4, atol=1e-5)
        assert len(calls) == 3


def test_inference_tensor_weights_are_repacked_every_call_with_one_warning(monkeypatch, caplog):
    """Weights made under inference_mode have no version counter: every call repacks (a write to them could
    not be seen otherwise), the result follows such a write, and fxc says once why it is slower."""
    from fxc.runtime.cpu import module as rt
    calls, real = [], rt.Module.run_prepared

    def spy(self, ins, outs, token=None):
        if self.prepack_inputs and token is None:     # no token: run_prepared always runs the prepack step
            calls.append(1)
        real(self, ins, outs, token)
    monkeypatch.setattr(rt.Module, "run_prepared", spy)
    import fxc.capture.torch.recorder as capture
    monkeypatch.setattr(capture, "_warned", set())       # said once per process: not yet in this test
    with torch.inference_mode():
        net, x = _conv_bn()
        f = torch.compile(net, backend="fxc")
        with caplog.at_level("WARNING", logger="fxc"):
            for _ in range(2):
                torch.testing.assert_close(f(x), net(x), rtol=1e-4, atol=1e-5)
            net.conv.weight.mul_(-1.0)              # no version bump on an inference tensor
            torch.testing.assert_close(f(x), net(x), rtol=1e-4, atol=1e-5)
    assert len(calls) == 3
    assert "inference tensors" in caplog.text
