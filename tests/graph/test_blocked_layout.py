"""use_blocked_layout (NCHW16c regions around depthwise convs): results against PyTorch eager, which values go
blocked, and where the layout changes."""
import re

import pytest
import torch

import fxc
from fxc.relay_like.passes.use_blocked_layout import blocked_values


class InvertedResidual(torch.nn.Module):
    """MobileNetV2's block: 1x1 expand, 3x3 depthwise (stride 1 or 2), 1x1 project, residual when shapes allow."""

    def __init__(self, cin, cout, stride, expand=6):
        super().__init__()
        mid = cin * expand
        self.body = torch.nn.Sequential(
            torch.nn.Conv2d(cin, mid, 1, bias=False), torch.nn.BatchNorm2d(mid), torch.nn.ReLU6(),
            torch.nn.Conv2d(mid, mid, 3, stride, 1, groups=mid, bias=False), torch.nn.BatchNorm2d(mid),
            torch.nn.ReLU6(),
            torch.nn.Conv2d(mid, cout, 1, bias=False), torch.nn.BatchNorm2d(cout))
        self.residual = stride == 1 and cin == cout

    def forward(self, x):
        y = self.body(x)
        return x + y if self.residual else y


def _net():
    """Stem (3 -> 16, NCHW in, blocked out), blocks with 24 channels (padded to 2 blocks) and a residual, a stride-2
    depthwise conv over 9x9 (odd sizes, border columns), a head conv and the global mean (NCHW again)."""
    torch.manual_seed(0)
    net = torch.nn.Sequential(
        torch.nn.Conv2d(3, 16, 3, 2, 1, bias=False), torch.nn.BatchNorm2d(16), torch.nn.ReLU6(),
        InvertedResidual(16, 24, 1), InvertedResidual(24, 24, 1), InvertedResidual(24, 32, 2),
        torch.nn.Conv2d(32, 64, 1), torch.nn.ReLU6(), torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten())
    for m in net.modules():
        if isinstance(m, torch.nn.BatchNorm2d):
            with torch.no_grad():
                m.running_mean.uniform_(-0.5, 0.5)
                m.running_var.uniform_(0.5, 2.0)
                m.weight.uniform_(0.5, 1.5)
    return net.eval()


def _groups(kernels):
    return [k.split(": ", 1)[1] for k in kernels]


def test_blocked_region_matches_eager_and_changes_layout_only_at_its_ends():
    net, x = _net(), torch.randn(2, 3, 18, 18)
    with torch.no_grad():
        ref = net(x)
        compiled = fxc.from_torch(net, (x,))
        torch.testing.assert_close(compiled(x), ref, rtol=1e-4, atol=1e-4)
    groups = _groups(compiled.module.kernels)
    assert sum("depthwise_blocked" in k for k in groups) == 3, groups
    assert any("pad+depthwise_blocked" in k for k in groups), "the zero pad is read through, not made"
    assert not any("permute" in k or "slice" in k for k in groups), f"no layout conversion kernel: {groups}"
    # the stem writes NCHW16c ([N, 1, 9, 9, 16]; NCHW8c on an 8-lane CPU); the head conv writes NCHW for the mean
    lanes = fxc.target.Target.parse("llvm").caps.lanes
    stem = f"float32[2, {16 // lanes}, 9, 9, {lanes}]  [anchor conv2d_packed]"
    assert any(k.startswith("conv2d_packed") and k.endswith(stem) for k in groups), groups
    assert any(k.startswith("conv2d_packed") and "-> float32[2, 64, 5, 5]" in k for k in groups), groups


def test_blocked_layout_through_torch_compile_follows_weight_changes():
    """The depthwise weight's blocked copy (reshape + permute) is a prepack step: redone when the weight changes."""
    net, x = _net(), torch.randn(1, 3, 18, 18)
    compiled = torch.compile(net, backend="fxc")
    with torch.no_grad():
        torch.testing.assert_close(compiled(x), net(x), rtol=1e-4, atol=1e-4)
        net[3].body[3].weight.mul_(-2.0)          # a depthwise weight, in place
        net[6].bias.add_(1.0)                      # the head conv's bias (a per-channel operand, reshaped)
        torch.testing.assert_close(compiled(x), net(x), rtol=1e-4, atol=1e-4)
    torch._dynamo.reset()


def test_blocked_value_read_in_nchw_mid_region():
    """A depthwise result (24 channels: padded lanes) also read by an op that needs NCHW: one conversion back,
    dropping the padding, while the region goes on blocked."""
    torch.manual_seed(1)

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.expand = torch.nn.Conv2d(8, 24, 1)
            self.dw = torch.nn.Conv2d(24, 24, 3, padding=1, groups=24)
            self.project = torch.nn.Conv2d(24, 16, 1)

        def forward(self, x):
            d = torch.relu(self.dw(torch.relu(self.expand(x))))
            return self.project(d), d.amax(dim=(2, 3))

    net, x = Net().eval(), torch.randn(1, 8, 10, 10)
    with torch.no_grad():
        compiled = fxc.from_torch(net, (x,))
        out, side = compiled(x)
        ref, ref_side = net(x)
    torch.testing.assert_close(out, ref, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(side, ref_side, rtol=1e-5, atol=1e-5)
    groups = _groups(compiled.module.kernels)
    assert any("depthwise_blocked" in k for k in groups) and any("permute" in k for k in groups), groups
    assert any(k.startswith("conv2d_packed") and "-> float32[1, 16, 10, 10]" in k for k in groups), groups


def test_no_region_without_a_depthwise_conv():
    """ResNet-style graphs (no depthwise conv) keep NCHW everywhere; blocked_layout=False turns the pass off."""
    from fxc.capture.torch.aot import capture
    from fxc.capture.torch.graph import to_graph
    from fxc.relay_like.context import PassContext
    from fxc.relay_like.passes import use_blocked_layout
    from fxc.relay_like.pipeline import PIPELINE
    ctx = PassContext()
    lanes = ctx.caps.lanes

    def graph_before_layout(net, x):
        gm, _ = capture(net, (x,))
        g = to_graph(gm, (x,), freeze=True)[0]
        for p in PIPELINE[:PIPELINE.index(use_blocked_layout)]:
            g = p(g, ctx)
        return g
    torch.manual_seed(0)
    plain = torch.nn.Sequential(torch.nn.Conv2d(3, 32, 3, padding=1), torch.nn.ReLU(),
                                torch.nn.Conv2d(32, 32, 1)).eval()
    assert blocked_values(graph_before_layout(plain, torch.randn(1, 3, 8, 8)), lanes) == set()
    g = graph_before_layout(_net(), torch.randn(1, 3, 18, 18))
    assert blocked_values(g, lanes)
    assert not any(n.op == "depthwise_blocked" for n in use_blocked_layout(g, PassContext(blocked_layout=False)).nodes)
    assert any(n.op == "depthwise_blocked" for n in use_blocked_layout(g, ctx).nodes)


@pytest.mark.parametrize("stride,hw", [(1, 7), (2, 9), (1, 16)])
def test_depthwise_blocked_shapes(stride, hw):
    """The schedule's column tiles (8 a tile), tails and border columns at several widths, strides and paddings."""
    torch.manual_seed(hw)
    net = torch.nn.Sequential(torch.nn.Conv2d(4, 32, 1), torch.nn.Conv2d(32, 32, 3, stride, 1, groups=32),
                              torch.nn.ReLU(), torch.nn.Conv2d(32, 16, 1)).eval()
    x = torch.randn(1, 4, hw, hw + 3)
    with torch.no_grad():
        compiled = fxc.from_torch(net, (x,))
        torch.testing.assert_close(compiled(x), net(x), rtol=1e-4, atol=1e-4)
    assert any("depthwise_blocked" in k for k in _groups(compiled.module.kernels))


def test_training_through_torch_compile_with_depthwise_convs():
    """Forward and backward graphs of a depthwise network (AOT autograd saves activations for the backward: graph
    outputs, which stay NCHW) give eager's loss and gradients."""
    torch.manual_seed(2)
    net = torch.nn.Sequential(torch.nn.Conv2d(4, 32, 1), torch.nn.ReLU6(),
                              torch.nn.Conv2d(32, 32, 3, 1, 1, groups=32), torch.nn.ReLU6(),
                              torch.nn.Conv2d(32, 16, 1), torch.nn.Flatten(), torch.nn.Linear(16 * 36, 3))
    ref = __import__("copy").deepcopy(net)
    x = torch.randn(2, 4, 6, 6)
    compiled = torch.compile(net, backend="fxc")
    compiled(x).square().sum().backward()
    ref(x).square().sum().backward()
    for (name, p), q in zip(net.named_parameters(), ref.parameters()):
        torch.testing.assert_close(p.grad, q.grad, rtol=1e-4, atol=1e-4, msg=name)
    torch._dynamo.reset()


@pytest.mark.parametrize("batch", [1, 2])
def test_bf16_convs_of_the_blocked_region_read_nchw16c_words(batch):
    """precision="bf16": every conv takes bf16 operands, the ones next to depthwise convs in NCHW16c. Their words
    (an activation's bytes in bfloat16) are made per row tile inside the conv's kernel, never a tensor of their own;
    the depthwise convs stay float32."""
    from fxc.backends.llvm.compile import target_machine
    from fxc.driver.options import bf16_everywhere
    if "+avx512bf16" not in target_machine()[3].split(",") or not bf16_everywhere():
        pytest.skip("this CPU runs no bf16 conv here (no AVX-512 BF16, or bf16 only where a weight streams)")
    net = _net()
    x = torch.randn(batch, 3, 18, 18)
    with torch.no_grad():
        compiled = fxc.from_torch(net, (x,), precision="bf16")
        ref = net(x)
        out = compiled(x)
        torch.testing.assert_close(out, ref, rtol=2e-2, atol=2e-2 * ref.abs().max().item())
        fp32 = fxc.from_torch(net, (x,))(x)
    assert (out - ref).abs().max() > 4 * (fp32 - ref).abs().max(), "bf16 operands round more than float32"
    groups = _groups(compiled.module.kernels)
    convs = [k for k in groups if "conv2d_packed" in k]
    assert len(convs) == 8 and all("conv2d_packed_bf16" in k for k in convs), groups     # stem, 3 x 2, head
    read_through = [k for k in convs if k.startswith("pack_bf16_pairs+conv2d_packed_bf16")]
    assert sum(k.endswith("16]  [anchor conv2d_packed_bf16]") for k in read_through) == 4, groups   # NCHW16c out
    words = [re.search(r"int32\[([^\]]*)\]", k).group(1) for k in groups if k.startswith("pack_bf16_pairs ->")]
    assert words and all(len(w.split(",")) == 4 for w in words), f"no words tensor of an NCHW16c value: {groups}"
    assert sum("depthwise_blocked" in k for k in groups) == 3, groups


@pytest.mark.parametrize("stride,dilation", [(1, 1), (2, 1), (1, 2)])
def test_bf16_blocked_conv_with_taps_reads_its_words_through(stride, dilation):
    """A 3x3 conv between depthwise convs (NCHW16c in and out, no pad of its own) in bf16: its row tiles' panels
    hold every tap's input columns (strided, dilated, a tail tile of 17 - 2 * dilation columns at stride 1)."""
    from fxc.backends.llvm.compile import target_machine
    from fxc.driver.options import bf16_everywhere
    if "+avx512bf16" not in target_machine()[3].split(",") or not bf16_everywhere():
        pytest.skip("this CPU runs no bf16 conv here (no AVX-512 BF16, or bf16 only where a weight streams)")
    torch.manual_seed(1)
    net = torch.nn.Sequential(
        torch.nn.Conv2d(3, 32, 1), torch.nn.Conv2d(32, 32, 3, 1, 1, groups=32), torch.nn.ReLU(),
        torch.nn.Conv2d(32, 48, 3, stride, 0, dilation), torch.nn.ReLU(),
        torch.nn.Conv2d(48, 48, 3, 1, 1, groups=48)).eval()
    x = torch.randn(1, 3, 17, 17)
    with torch.no_grad():
        compiled = fxc.from_torch(net, (x,), precision="bf16")
        ref = net(x)
        torch.testing.assert_close(compiled(x), ref, rtol=2e-2, atol=2e-2 * ref.abs().max().item())
    groups = _groups(compiled.module.kernels)
    assert any(k.startswith("pack_bf16_pairs+conv2d_packed_bf16") and "16]  [anchor" in k for k in groups), groups


def test_bf16_conv_over_an_odd_channel_count_in_nchw16c_stays_float32():
    """23 channels in NCHW16c: their last bf16 pair would join channel 22 to a padding lane, so that conv keeps
    float32 operands (the stem, reading NCHW, pairs with a zero channel as everywhere)."""
    from fxc.backends.llvm.compile import target_machine
    from fxc.driver.options import bf16_everywhere
    if "+avx512bf16" not in target_machine()[3].split(",") or not bf16_everywhere():
        pytest.skip("this CPU runs no bf16 conv here (no AVX-512 BF16, or bf16 only where a weight streams)")
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Conv2d(3, 23, 1), torch.nn.Conv2d(23, 23, 3, 1, 1, groups=23), torch.nn.ReLU(),
                              torch.nn.Conv2d(23, 32, 1), torch.nn.Conv2d(32, 32, 3, 1, 1, groups=32)).eval()
    x = torch.randn(1, 3, 12, 12)
    with torch.no_grad():
        compiled = fxc.from_torch(net, (x,), precision="bf16")
        ref = net(x)
        torch.testing.assert_close(compiled(x), ref, rtol=2e-2, atol=2e-2 * ref.abs().max().item())
    convs = [k for k in _groups(compiled.module.kernels) if "conv2d_packed" in k]
    assert len(convs) == 2 and "conv2d_packed_bf16" in convs[0] and convs[1].startswith("conv2d_packed+"), convs


def test_blocked_model_exports_and_loads(tmp_path):
    """An artifact of a model with NCHW16c regions runs in the framework-free runtime with eager's results."""
    net, x = _net(), torch.randn(1, 3, 18, 18)
    with torch.no_grad():
        compiled = fxc.from_torch(net, (x,))
        ref = net(x).numpy()
    loaded = fxc.load(fxc.export(compiled, tmp_path / "mobile.fxc"))
    out = loaded(x.numpy())
    import numpy as np
    np.testing.assert_allclose(out if not isinstance(out, list) else out[0], ref, rtol=1e-4, atol=1e-4)
