"""torch.compile(backend="fxc") with a target that cannot be opened or a bad option (issue 41, item 21): the fxc
error itself reaches the caller (`except fxc.errors.TargetError` catches it), raised before anything is traced,
never torch's BackendCompilerFailed."""
import pytest
import torch

import fxc
from fxc.errors import FxcError, TargetError


def f(x):
    return torch.relu(x) * 2 + 1


def test_unopenable_device_is_the_target_error_itself(monkeypatch):
    monkeypatch.setenv("FXC_OPENCL_DEVICE", "garbage")
    traced = []
    monkeypatch.setattr("fxc.capture.torch.backend.inference_graph", lambda *a: traced.append(a))
    with pytest.raises(TargetError, match="no OpenCL device matches 'garbage'") as caught:
        torch.compile(f, backend="fxc", options={"target": "opencl"})(torch.randn(3))
    assert not traced                       # refused before any tracing
    assert not isinstance(caught.value, torch._dynamo.exc.BackendCompilerFailed)
    torch._dynamo.reset()
    monkeypatch.delenv("FXC_OPENCL_DEVICE")
    x = torch.randn(3)
    torch.testing.assert_close(torch.compile(f, backend="fxc", options={"target": "llvm"})(x), f(x))


@pytest.mark.parametrize("options, error, says", [
    ({"target": "tpu"}, TargetError, "unknown target 'tpu'"),
    ({"bogus": 1}, FxcError, "unknown fxc option"),
    ({"winograd": "maybe"}, FxcError, "unknown winograd='maybe'"),
    ({"precision": "half"}, TargetError, "'fp32', 'bf16'"),
])
def test_checked_options_raise_as_themselves(options, error, says):
    try:
        torch.compile(f, backend="fxc", options=options)(torch.randn(3))
    except error as e:                      # (an `except` clause, as the user writes it)
        assert says in str(e) and type(e).__name__ == error.__name__ and isinstance(e, fxc.errors.FxcError)
    else:
        pytest.fail(f"no {error.__name__} for {options}")
