"""Training keeps eager's accuracy (issue 41, item 5): the gradients of one training step through
torch.compile(backend="fxc") against a float64 run, within a few times eager float32's own error. Winograd F(4x4)
in a training step's forward cost 400x eager's error on ResNet-18 (its activations feed batch norm's batch
statistics and the backward); training graphs take the forms whose rounding is a direct convolution's."""
import copy

import pytest
import torch
import torch.nn.functional as F

from fxc.relay_like.builder import Builder
from fxc.relay_like.context import PassContext
from fxc.relay_like.passes import infer_types
from fxc.relay_like.passes.use_winograd import use_winograd

ERROR_FACTOR = 3        # fxc's gradient error may be this many times eager float32's


class SmallResNet(torch.nn.Module):
    """A stem, a basic block at 16x16 over 32 channels (F(4x4) in inference: 32 4x4 tiles at batch 2), then
    strided convs down to 2x2, each with batch norm (whose batch statistics over few values amplify an error in the
    activations, as ResNet-18's last layers at 64x64 do), pooled. At batch 2 F(4x4) gave 5.7x eager's error, the
    direct convolution 1.6x."""

    def __init__(self, c: int = 32, classes: int = 10):
        super().__init__()
        self.stem, self.b0 = torch.nn.Conv2d(3, c, 3, padding=1, bias=False), torch.nn.BatchNorm2d(c)
        self.c1, self.b1 = torch.nn.Conv2d(c, c, 3, padding=1, bias=False), torch.nn.BatchNorm2d(c)
        self.c2, self.b2 = torch.nn.Conv2d(c, c, 3, padding=1, bias=False), torch.nn.BatchNorm2d(c)
        self.down = torch.nn.ModuleList(torch.nn.Conv2d(c, c, 3, stride=2, padding=1, bias=False) for _ in range(3))
        self.bns = torch.nn.ModuleList(torch.nn.BatchNorm2d(c) for _ in range(3))
        self.fc = torch.nn.Linear(c, classes)

    def forward(self, x):
        x = torch.relu(self.b0(self.stem(x)))
        y = torch.relu(self.b1(self.c1(x)))
        y = torch.relu(self.b2(self.c2(y)) + x)
        for conv, bn in zip(self.down, self.bns):
            y = torch.relu(bn(conv(y)))
        return self.fc(y.mean((2, 3)))


def _grads(model, fn, x, y):
    model.zero_grad()
    F.cross_entropy(fn(x), y).backward()
    return [p.grad.detach().double().clone() for p in model.parameters()]


def _error(grads, reference) -> float:
    """The gradients' relative error in norm over all parameters."""
    num = sum(((a - b) ** 2).sum() for a, b in zip(grads, reference)) ** 0.5
    return float(num / sum((b ** 2).sum() for b in reference) ** 0.5)


@pytest.mark.parametrize("model, shape", [(SmallResNet, (2, 3, 16, 16))])
def test_training_gradients_match_float64(model, shape):
    torch.manual_seed(0)
    base = model().train()
    x, y = torch.randn(*shape), torch.randint(0, 10, (shape[0],))
    m64 = copy.deepcopy(base).double()
    reference = _grads(m64, m64, x.double(), y)
    eager = copy.deepcopy(base)
    eager_error = _error(_grads(eager, eager, x, y), reference)
    m = copy.deepcopy(base)
    fxc_error = _error(_grads(m, torch.compile(m, backend="fxc"), x, y), reference)
    assert fxc_error <= ERROR_FACTOR * max(eager_error, 1e-7), (fxc_error, eager_error)


def _forms(weights_vary: bool) -> list:
    b = Builder()
    g = b.graph
    x = g.input((4, 64, 18, 18), "float32")
    g.outputs = [g.call1("conv2d", [x, g.input((64, 64, 3, 3), "float32")])]
    ctx = PassContext(weights_vary=weights_vary)
    return [(n.op, n.attrs.get("tile")) for n in use_winograd(infer_types(g, ctx), ctx).nodes if "conv2d" in n.op]


def test_training_graphs_take_accurate_forms_and_inference_keeps_winograd():
    """The form is read from what the graph is: a training step's (weights_vary) convolution is Winograd F(2x2)
    (as accurate as the direct convolution), an inference graph's the fast F(4x4) of today."""
    assert _forms(weights_vary=False) == [("conv2d_winograd", 4)]
    assert _forms(weights_vary=True) == [("conv2d_winograd", 2)]
