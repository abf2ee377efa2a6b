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
