"""The torch.compile backend's per-call weight check in C (fxc/capture/torch/weight_check.cpp, WeightCheck) says what
the
Python check says: the same tensors at the same versions and addresses, and sees an in-place update (an optimizer
step), `p.data = t`, a new Parameter and a write through `.data` (the fingerprint's part) through torch.compile."""
import shutil

import pytest
import torch

from fxc.capture.torch import weights as tw

pytestmark = pytest.mark.skipif(shutil.which("g++") is None, reason="the C check is built with g++")


@pytest.fixture(scope="module")
def native():
    fn = tw.native(wait=True)
    assert fn is not None, "weight_check.cpp did not build (see the fxc log at INFO)"
    return fn


def _python(check, args) -> bool:
    weights = check.pick(args)
    return all(a is b for a, b in zip(weights, check.tensors)) and \
        [w._version for w in weights] == check.versions and [w.data_ptr() for w in weights] == check.addresses


def test_c_check_agrees_with_python(native):
    ps = [torch.nn.Parameter(torch.randn(4, 3)), torch.nn.Parameter(torch.randn(5)), torch.randn(2, 2)[:, 1]]
    x = torch.randn(3)
    args = (x, ps[0], 7, ps[1], ps[2])
    pos = [1, 3, 4]

    def check():
        return tw.WeightCheck(pos, list(ps), [p._version for p in ps], [p.data_ptr() for p in ps])
    c = check()
    assert native(args, *c.c_args) == 1 and c(args) and _python(c, args)
    with torch.no_grad():
        ps[0].add_(1.0)                                     # an optimizer step: a new version
    assert native(args, *c.c_args) == 0 and not c(args) and not _python(c, args)
    c = check()
    ps[1].data = torch.randn(5)                             # a new address, the same version
    assert native(args, *c.c_args) == 0 and not c(args) and not _python(c, args)
    c = check()
    other = (x, ps[0], 7, torch.nn.Parameter(ps[1].detach().clone()), ps[2])   # another object
    assert native(other, *c.c_args) == 0 and not c(other)
    assert native(list(args), *c.c_args) == -1 and c(list(args))     # not a tuple: Python decides (same)
    assert native(args[:3], *c.c_args) == -1                          # too short: Python decides
    assert c(args) and native(args, *c.c_args) == 1


def _net():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.BatchNorm2d(8), torch.nn.ReLU(),
                               torch.nn.Flatten(), torch.nn.Linear(8 * 6 * 6, 5)).eval()


def test_weight_changes_are_seen_through_torch_compile_with_the_c_check(native, monkeypatch):
    said = []
    monkeypatch.setitem(tw._native, "fn", lambda *a: said.append(native(*a)) or said[-1])   # (counts its answers)
    net, x = _net(), torch.randn(2, 3, 6, 6)
    f = torch.compile(net, backend="fxc")
    with torch.inference_mode():
        for _ in range(2):
            torch.testing.assert_close(f(x), net(x), rtol=1e-4, atol=1e-5)
    with torch.no_grad():
        net[0].weight.mul_(-1.5)                            # in place: a new version
    with torch.inference_mode():
        torch.testing.assert_close(f(x), net(x), rtol=1e-4, atol=1e-5)
    net[4].weight.data = torch.randn(5, 8 * 6 * 6)         # a new tensor behind the parameter: a new address
    with torch.inference_mode():
        torch.testing.assert_close(f(x), net(x), rtol=1e-4, atol=1e-5)
    net[1].running_var.data.copy_(torch.rand(8) + 0.5)      # through .data: neither version nor address
    with torch.inference_mode():
        torch.testing.assert_close(f(x), net(x), rtol=1e-4, atol=1e-5)
    net[0].bias = torch.nn.Parameter(torch.randn(8))        # a new Parameter object
    with torch.inference_mode():
        torch.testing.assert_close(f(x), net(x), rtol=1e-4, atol=1e-5)
    assert 1 in said and 0 in said and -1 not in said, said     # the C pass decided, both ways


def test_without_gxx_the_python_check_decides(monkeypatch, caplog):
    monkeypatch.setattr(tw.shutil, "which", lambda name: None)
    monkeypatch.setattr(tw, "PREBUILT", tw.SOURCE.parent / "_no_such_folder")
    monkeypatch.setattr(tw, "_native", {"fn": None, "thread": "done"})
    with caplog.at_level("INFO", logger="fxc"):
        tw._load()
    assert tw._native["fn"] is None and "stays in Python" in caplog.text and "g++" in caplog.text
    p = torch.nn.Parameter(torch.randn(3))
    c = tw.WeightCheck([0], [p], [p._version], [p.data_ptr()])
    assert c((p,))
    with torch.no_grad():
        p.mul_(2.0)
    assert not c((p,))
