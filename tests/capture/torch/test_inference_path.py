"""The torch.compile backend's inference path (fxc/capture/torch/inference.py): with grad mode off, Dynamo's graph is
compiled without AOT autograd; in grad mode, and for graphs that are not pure functions, AOT autograd as before."""
import pytest
import torch
import torch._dynamo.backends.common as dynamo_common
import torch.nn as nn

from fxc.capture.torch.recorder import recording
from tests.helpers import sgd_steps


class ConvNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv, self.bn, self.fc = nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.Linear(8, 5)

    def forward(self, x):
        return self.fc(torch.relu(self.bn(self.conv(x))).mean((2, 3)))


@pytest.fixture
def aot_calls(monkeypatch):
    """How many times fxc's backend went through AOT autograd (not Dynamo's own backends, built when imported)."""
    calls = []
    real = dynamo_common.aot_autograd

    def counting(**kwargs):
        if getattr(kwargs.get("fw_compiler"), "__module__", "") == "fxc.capture.torch.backend":
            calls.append(1)
        return real(**kwargs)
    monkeypatch.setattr(dynamo_common, "aot_autograd", counting)
    return calls


def _model():
    torch.manual_seed(0)
    m = ConvNet().eval()
    with torch.no_grad():       # running statistics that are not the identity
        m.bn.running_mean.uniform_(-0.5, 0.5)
        m.bn.running_var.uniform_(0.5, 2.0)
    return m


@pytest.mark.parametrize("mode", ["no_grad", "inference_mode"])
def test_grad_mode_off_skips_aot_autograd_and_follows_weight_updates(target, aot_calls, mode):
    m = _model()
    c = torch.compile(m, backend="fxc", options={"target": target})
    x = torch.randn(2, 3, 10, 10)
    ctx = torch.no_grad if mode == "no_grad" else torch.inference_mode
    with recording() as rec, ctx():
        got = c(x)
        torch.testing.assert_close(got, m(x), rtol=1e-4, atol=1e-5)
        assert not got.requires_grad
        assert (rec.inference_graphs, rec.graphs, len(aot_calls)) == (1, 1, 0), str(rec)
        m.conv.weight.mul_(-2.0)        # in place (a version bump): the compiled model sees it
        m.bn.running_var.add_(1.0)
        torch.testing.assert_close(c(x), m(x), rtol=1e-4, atol=1e-5)
        m.fc.weight = nn.Parameter(torch.randn(5, 8))     # a new tensor in the same place
        torch.testing.assert_close(c(x), m(x), rtol=1e-4, atol=1e-5)
    assert len(aot_calls) == 0


def test_grad_mode_takes_aot_autograd_and_trains_like_eager(target, aot_calls):
    torch.manual_seed(0)
    m1 = ConvNet()
    m2 = ConvNet()
    m2.load_state_dict(m1.state_dict())
    c = torch.compile(m2, backend="fxc", options={"target": target})
    x, y = torch.randn(4, 3, 8, 8), torch.randn(4, 5)
    with recording() as rec:
        sgd_steps((m1, c), x, y)
    assert rec.inference_graphs == 0 and len(aot_calls) >= 1, str(rec)
    for p1, p2 in zip(m1.state_dict().values(), m2.state_dict().values()):    # BN's running statistics too
        torch.testing.assert_close(p1, p2, rtol=1e-4, atol=1e-5)


def test_no_grad_then_grad_recompiles_through_aot_autograd(target, aot_calls):
    m = _model()
    c = torch.compile(m, backend="fxc", options={"target": target})
    x = torch.randn(2, 3, 6, 6)
    with torch.no_grad():
        torch.testing.assert_close(c(x), m(x), rtol=1e-4, atol=1e-5)
    assert len(aot_calls) == 0
    c(x).sum().backward()               # grad mode: Dynamo's grad-mode guard fails, the new graph is AOT autograd's
    assert len(aot_calls) == 1
    want = {n: p.grad.clone() for n, p in m.named_parameters()}
    m.zero_grad()
    m(x).sum().backward()
    for n, p in m.named_parameters():
        torch.testing.assert_close(want[n], p.grad, rtol=1e-4, atol=1e-5)


def test_graphs_that_are_not_pure_functions_keep_aot_autograd(target, aot_calls):
    """An input written in place (BatchNorm's running statistics in training mode) or an output that is a view of
    an input: AOT autograd's wrappers do what eager does."""
    m = _model().train()
    ref = _model().train()
    c = torch.compile(m, backend="fxc", options={"target": target})
    x = torch.randn(4, 3, 6, 6)
    with recording() as rec, torch.no_grad():
        torch.testing.assert_close(c(x), ref(x), rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(m.bn.running_mean, ref.bn.running_mean)
    assert rec.inference_graphs == 0 and len(aot_calls) == 1

    f = torch.compile(lambda t: (t.view(-1), t * 2), backend="fxc", options={"target": target})
    t = torch.randn(3, 4)
    with torch.no_grad():
        v, d = f(t)
    assert v.data_ptr() == t.data_ptr()     # a real view, as in eager
    torch.testing.assert_close(d, t * 2)
    assert len(aot_calls) == 2


def test_skipping_dynamos_module_guards_keeps_weight_updates_seen(target):
    """options={"guard_filter_fn": torch.compiler.skip_guard_on_inbuilt_nn_modules_unsafe} (the user's opt-out of
    Dynamo's per-call guards on parameters, benchmarks' fxc_no_module_guards peer): Dynamo no longer recompiles
    when a parameter is replaced, and fxc's own checks of the weights (addresses, versions) still follow it."""
    m = _model()
    skip = torch.compiler.skip_guard_on_inbuilt_nn_modules_unsafe
    c = torch.compile(m, backend="fxc", options={"target": target, "guard_filter_fn": skip})
    x = torch.randn(2, 3, 10, 10)
    with torch.no_grad():
        torch.testing.assert_close(c(x), m(x), rtol=1e-4, atol=1e-5)
        m.conv.weight.mul_(-2.0)                            # in place: a version bump
        torch.testing.assert_close(c(x), m(x), rtol=1e-4, atol=1e-5)
        m.fc.weight = nn.Parameter(torch.randn(5, 8))      # a new tensor in the same place
        torch.testing.assert_close(c(x), m(x), rtol=1e-4, atol=1e-5)
        m.conv.weight.data = torch.randn(8, 3, 3, 3)        # new storage behind the same Parameter
        torch.testing.assert_close(c(x), m(x), rtol=1e-4, atol=1e-5)
