"""The three reference models end to end through torch.compile(backend="fxc"), against eager.

Every op of each model must compile (no eager fallback), and the result must be within 1e-4 x the
output's scale of eager PyTorch."""
import pytest
import torch

import fxc
from fxc.testing.models import example_inputs, make_model
from fxc.testing.zoo import ZOO_NAMES, make_zoo_model, zoo_inputs
from tests.helpers import check_module

MODELS = ["resnet18", "mobilenet_v2", "bert"]


@pytest.mark.slow
@pytest.mark.parametrize("name", MODELS)
def test_model_matches_eager_with_nothing_left_to_eager(name, target):
    model = make_model(name)
    inputs = example_inputs(name, batch=2 if name == "bert" else 1, seq_len=64)
    rep = fxc.explain(model, *inputs, target=target)
    assert not rep.fallback_ops, f"{name}: fell back to eager: {dict(rep.fallback_ops)}"
    assert rep.kernels, f"{name}: no kernels were generated"
    out = check_module(model, *inputs, target=target, rtol=0, atol=1e-4)
    assert torch.isfinite(out).all() and out.abs().max() > 1e-2, "degenerate model output: the test would be vacuous"


@pytest.mark.slow
@pytest.mark.parametrize("isa", ["llvm -mcpu=haswell", "llvm -mcpu=x86-64-v2"])
@pytest.mark.parametrize("name", MODELS)
def test_model_on_a_lower_isa_matches_eager(name, isa):
    """The reference models built for a lower ISA (AVX2 with 16 vector registers, SSE4.2) run on this host and
    match eager: schedules and passes read the target's vector width and register count, not this host's."""
    from fxc.target import Target, host_features
    missing = Target.parse(isa).caps.features - host_features()
    if missing:
        pytest.skip(f"this host's CPU lacks {', '.join(sorted(missing))}")
    model = make_model(name)
    inputs = example_inputs(name, batch=1, seq_len=32)
    out = check_module(model, *inputs, target=isa, rtol=0, atol=1e-4)
    assert torch.isfinite(out).all() and out.abs().max() > 1e-2, "degenerate model output: the test would be vacuous"


@pytest.mark.slow
def test_resnet18_batch_of_two_and_repeated_calls(target):
    """Several calls with new data reuse the compiled code and stay correct."""
    model = make_model("resnet18")
    compiled = torch.compile(model, backend="fxc", options={"target": target})
    with torch.no_grad():
        for seed in range(2):
            x = example_inputs("resnet18", batch=2, seed=seed)[0]
            expected = model(x)
            torch.testing.assert_close(compiled(x), expected, rtol=0, atol=1e-4 * expected.abs().max().item())


@pytest.mark.slow
@pytest.mark.parametrize("name", [n for n in ZOO_NAMES if n != "lstm"])
def test_other_architectures_match_eager_with_nothing_left_to_eager(name, target):
    """Reduced twins of the families in fxc/testing/zoo.py (7x7 depthwise and channel LayerNorm, SiLU and
    squeeze-excite, a ViT's patch conv and nn.TransformerEncoder, causal attention with a tied head, a U-Net's
    transposed convs, bilinear upsampling and concatenation), batch 2, against eager."""
    model, inputs = make_zoo_model(name, small=True), zoo_inputs(name, small=True)
    rep = fxc.explain(model, *inputs, target=target)
    assert rep.graphs and not rep.fallback_ops, f"{name}: {rep}"
    out = check_module(model, *inputs, target=target, rtol=0, atol=1e-4)
    assert torch.isfinite(out).all() and out.std() > 1e-3, "degenerate model output: the test would be vacuous"


def test_an_lstm_model_runs_in_eager_without_allow_rnn_and_compiles_with_it(target):
    """Dynamo captures nn.LSTM only with torch._dynamo.config.allow_rnn: without it the LSTM runs in eager PyTorch
    (fxc compiles the head, and explain names the switch); with it fxc compiles the LSTM too, as a loop over time
    steps (fxc/ops/rnn.py). Either way the result is eager's."""
    model, inputs = make_zoo_model("lstm", small=True), zoo_inputs("lstm", small=True)
    with torch._dynamo.config.patch(allow_rnn=False):
        rep = fxc.explain(model, *inputs, target=target)
        assert "fxc.lstm.default" not in rep.compiled_ops and any("allow_rnn" in n for n in rep.notes), str(rep)
        torch._dynamo.reset()
        check_module(model, *inputs, target=target, rtol=0, atol=1e-5)
    torch._dynamo.reset()
    with torch._dynamo.config.patch(allow_rnn=True):
        rep = fxc.explain(model, *inputs, target=target)
        assert rep.compiled_ops["fxc.lstm.default"] == 1 and not rep.fallback_ops and not rep.notes, str(rep)
        torch._dynamo.reset()
        check_module(model, *inputs, target=target, rtol=0, atol=1e-5)
