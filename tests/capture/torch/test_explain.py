"""fxc.explain with keyword inputs (issue 27 item 7): torch._dynamo.explain's form `fxc.explain(model,
options=...)(*args, **kwargs)` beside the positional form `fxc.explain(model, *inputs, **options)`."""
import pytest
import torch

import fxc
from fxc.errors import FxcError


class TinyEncoder(torch.nn.Module):
    """Called as a Hugging Face model is: model(input_ids=..., attention_mask=...)."""

    def __init__(self):
        super().__init__()
        self.embed = torch.nn.Embedding(50, 16)
        self.proj = torch.nn.Linear(16, 16)

    def forward(self, input_ids, attention_mask=None):
        h = torch.tanh(self.proj(self.embed(input_ids)))
        if attention_mask is not None:
            h = h * attention_mask[..., None]
        return h.sum(1)


@pytest.fixture
def inputs():
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(0, 50, (2, 7), generator=g)
    mask = torch.ones(2, 7)
    mask[1, 4:] = 0
    return ids, mask


def test_keyword_inputs(inputs, target):
    ids, mask = inputs
    rep = fxc.explain(TinyEncoder().eval(), options={"target": target})(input_ids=ids, attention_mask=mask)
    assert isinstance(rep, fxc.capture.torch.recorder.Explanation)
    assert rep.graphs == 1 and not rep.failures and not rep.fallback_ops, str(rep)
    assert rep.compiled_ops["aten.mm.default"] + rep.compiled_ops["aten.addmm.default"] >= 1, str(rep)
    assert rep.compiled_ops["aten.mul.Tensor"] >= 1, str(rep)            # the mask was given, and applied


def test_options_reach_the_compile(inputs):
    """options= is what the backend gets: without fusion the same graph has more kernels."""
    ids, mask = inputs
    model = TinyEncoder().eval()
    fused = fxc.explain(model)(ids, attention_mask=mask)
    unfused = fxc.explain(model, options={"fuse": False})(ids, attention_mask=mask)
    assert len(unfused.kernels) > len(fused.kernels), (fused.kernels, unfused.kernels)


def test_positional_form_still_works(inputs):
    ids, mask = inputs
    model = TinyEncoder().eval()
    rep = fxc.explain(model, ids, mask, fuse=False)
    assert rep.compiled_ops and len(rep.kernels) == len(fxc.explain(model, options={"fuse": False})(ids, mask).kernels)
    assert fxc.explain(model, ids, mask, options={"fuse": False}).kernels == rep.kernels


def test_a_keyword_input_in_the_positional_form_names_the_other_form(inputs):
    ids, mask = inputs
    with pytest.raises(FxcError, match=r"attention_mask: not an fxc option.*fxc\.explain\(model, options="):
        fxc.explain(TinyEncoder(), ids, attention_mask=mask)


def test_graph_breaks_carry_dynamo_reasons():
    """Issue 42 item 4: a data-dependent `if` and a nonzero give graph breaks; explain lists each with Dynamo's
    reason and the user's line, and counts the nonzero (run outside every graph) as fallen back."""
    def f(x):
        y = x * 2
        if y.sum() > 0:
            y = y + 1
        z = torch.nonzero(y > 1.5)
        return y.sin(), z
    rep = fxc.explain(f, torch.ones(4, 5))
    reasons = [b.reason for b in rep.graph_breaks]
    assert len(rep.graph_breaks) == 2 and rep.graphs == 3, str(rep)
    assert "data-dependent branching" in reasons[0] and "if y.sum() > 0" in rep.graph_breaks[0].where, str(rep)
    assert "nonzero" in rep.graph_breaks[1].detail and "torch.nonzero" in rep.graph_breaks[1].where, str(rep)
    assert rep.fallback_ops["aten.nonzero.default"] == 1 and "2 graph break(s)" in str(rep) \
        and "1 fell back" in str(rep), str(rep)


@pytest.mark.targets("opencl")
def test_a_subgraph_refused_by_the_device_counts_as_eager(target):
    """bessel_j0 has no OpenCL C function: its subgraph fails to lower there and runs in eager; explain counts its
    ops as fallen back (not compiled), with the error, which says why a float32 op speaks of float64."""
    f = lambda x: torch.special.bessel_j0(x * 2) + 1  # noqa: E731
    x = torch.linspace(-3, 3, 8)
    rep = fxc.explain(f, x, target=target)
    (failure,) = rep.failures
    assert "j0" in failure.error and "float64 whatever the tensor's dtype" in failure.error, failure
    assert not rep.compiled_ops and rep.fallback_ops["aten.special_bessel_j0.default"] == 1, str(rep)
    assert dict(failure.ops)["aten.mul.Tensor"] == 1 and "failed to compile" in \
        rep.fallback_reasons["aten.special_bessel_j0.default"], str(rep)
    torch._dynamo.reset()
    torch.testing.assert_close(torch.compile(f, backend="fxc", options={"target": target})(x), f(x))
