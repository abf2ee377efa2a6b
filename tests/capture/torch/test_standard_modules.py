"""Standard torch.nn modules through torch.compile(backend="fxc") and fxc.from_torch, against eager: PyTorch's fused
fast paths (aten._transformer_encoder_layer_fwd, aten._native_multi_head_attention) decomposed with every mask,
need_weights, norm_first and activation variant, and nn.LSTM / nn.GRU / nn.RNN compiled as a loop over time steps
(fxc/capture/torch/fused.py, fxc/ops/rnn.py). Results within 1e-4 x the output's scale of eager."""
import pytest
import torch
import torch.nn as nn

import fxc
from fxc.testing.standard import (
    RNN_NAMES,
    STANDARD_NAMES,
    RNNClassifier,
    make_standard_model,
    standard_inputs,
    transformer_encoder,
)
from tests.helpers import check_module

HEAVY = ("mm", "bmm", "addmm", "linear", "matmul", "lstm", "gru", "rnn", "_transformer_encoder_layer_fwd",
         "_native_multi_head_attention", "scaled_dot_product")


def _allow_rnn(on=True):
    return torch._dynamo.config.patch(allow_rnn=on)


def _share(rep):
    done, left = sum(rep.compiled_ops.values()), sum(rep.fallback_ops.values())
    return done / max(done + left, 1)


def _heavy_left(rep):
    return [op for op in rep.fallback_ops if any(h in op.split(".")[1] for h in HEAVY)]


@pytest.mark.parametrize("name", STANDARD_NAMES)
def test_standard_module_compiles_and_matches_eager(name, target):
    model, inputs = make_standard_model(name, small=True), standard_inputs(name, small=True)
    with _allow_rnn(name in RNN_NAMES):
        rep = fxc.explain(model, *inputs, target=target)
        assert rep.graphs and _share(rep) >= 0.9 and not _heavy_left(rep), f"{name}: {rep}"
        torch._dynamo.reset()
        out = check_module(model, *inputs, target=target, rtol=0, atol=1e-4)
    assert torch.isfinite(out).all() and out.std() > 1e-3, "degenerate model output: the test would be vacuous"


@pytest.mark.parametrize("name", ["transformer_encoder", "lstm_classifier"])
def test_standard_module_under_inference_mode(name):
    """Called under torch.inference_mode() (inference tensors, no version counters): the fused path and the
    recurrent op compile the same way."""
    import fxc.capture.torch.recorder as fxc_torch
    model, inputs = make_standard_model(name, small=True), standard_inputs(name, small=True)
    rec = fxc_torch.Explanation()
    fxc_torch._recorders.append(rec)
    try:
        with _allow_rnn(), torch.inference_mode():
            expected = model(*inputs)
            actual = torch.compile(model, backend="fxc")(*inputs)
    finally:
        fxc_torch._recorders.remove(rec)
    assert rec.graphs and not rec.fallback_ops and not rec.failures, str(rec)
    assert ("fxc.lstm.default" if name == "lstm_classifier" else "aten.native_layer_norm.default") in rec.compiled_ops
    torch.testing.assert_close(actual, expected, rtol=0, atol=1e-4 * expected.abs().max().item())


def test_the_issues_transformer_encoder_compiles():
    """Issue 27's report: a 4-layer nn.TransformerEncoder(TransformerEncoderLayer(256, 4, 1024, dropout=0.0,
    activation="gelu", batch_first=True), enable_nested_tensor=False) on [1, 128, 256] under no_grad gave
    `0 ops compiled, 4 fell back: aten._transformer_encoder_layer_fwd`."""
    model, inputs = make_standard_model("transformer_encoder"), standard_inputs("transformer_encoder")
    assert "aten._transformer_encoder_layer_fwd.default" in _eager_ops(model, *inputs)
    rep = fxc.explain(model, *inputs)
    assert not rep.fallback_ops and rep.compiled_ops["aten.addmm.default"] == 16, str(rep)
    torch._dynamo.reset()
    check_module(model, *inputs, rtol=0, atol=1e-4)


class _Encoder(nn.Module):
    def __init__(self, **kw):
        super().__init__()
        self.enc = transformer_encoder(32, 4, 64, 2, **kw)

    def forward(self, x, mask=None, key_padding_mask=None):
        return self.enc(x, mask=mask, src_key_padding_mask=key_padding_mask, is_causal=False)


def _eager_ops(model, *args) -> set:
    """The ATen ops eager PyTorch runs for model(*args) under no_grad."""
    from torch.utils._python_dispatch import TorchDispatchMode
    seen = set()

    class Record(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            seen.add(str(func))
            return func(*args, **(kwargs or {}))
    with torch.no_grad(), Record():
        model(*args)
    return seen


def _masks(batch=2, steps=10):
    torch.manual_seed(3)
    src = torch.rand(steps, steps) < 0.3
    src.fill_diagonal_(False)                # no query with every key masked
    pad = torch.zeros(batch, steps, dtype=torch.bool)
    pad[0, 7:] = True
    return src, pad


@pytest.mark.parametrize("norm_first,activation", [(False, "relu"), (True, "gelu")])
@pytest.mark.parametrize("masks", ["none", "src", "padding", "both", "float-src"])
def test_encoder_layer_fast_path_variants(norm_first, activation, masks):
    """Every mask form TransformerEncoderLayer's fused op takes (merged by nn.MultiheadAttention.merge_masks into
    mask_type 0, 1 or 2), both norm placements and both activations: compiled, nothing heavy left to eager."""
    torch.manual_seed(0)
    model = _Encoder(norm_first=norm_first, activation=activation).eval()
    src, pad = _masks()
    x = torch.randn(2, 10, 32)
    mask = {"none": None, "src": src, "padding": None, "both": src,
            "float-src": torch.where(src, -torch.inf, 0.0)}[masks]
    kpm = pad if masks in ("padding", "both") else None
    assert "aten._transformer_encoder_layer_fwd.default" in _eager_ops(model, x, mask, kpm)   # the fused path
    with torch.no_grad():
        rep = fxc.explain(model, x, mask, kpm)
    assert rep.graphs and _share(rep) >= 0.9 and not _heavy_left(rep), str(rep)
    assert "aten._transformer_encoder_layer_fwd.default" not in rep.compiled_ops
    torch._dynamo.reset()
    check_module(model, x, mask, kpm, rtol=0, atol=1e-4)


class _FusedAttention(nn.Module):
    """aten._native_multi_head_attention called as nn.MultiheadAttention's fast path calls it."""

    def __init__(self, need_weights, average, mask_type):
        super().__init__()
        torch.manual_seed(1)
        self.m = nn.MultiheadAttention(32, 4, batch_first=True)
        with torch.no_grad():
            self.m.in_proj_bias.normal_(0, 0.1)
            self.m.out_proj.bias.normal_(0, 0.1)
        self.need_weights, self.average, self.mask_type = need_weights, average, mask_type

    def forward(self, x, mask=None, kv=None):
        m, kv = self.m, (x if kv is None else kv)
        return torch._native_multi_head_attention(x, kv, kv, 32, 4, m.in_proj_weight, m.in_proj_bias, m.out_proj.weight,
                                                  m.out_proj.bias, mask, self.need_weights, self.average,
                                                  self.mask_type)


@pytest.mark.parametrize("need_weights,average", [(False, True), (True, True), (True, False)])
@pytest.mark.parametrize("mask_type", [None, 0, 1, 2])
def test_native_multi_head_attention(need_weights, average, mask_type):
    """Each mask type, with and without the (head-averaged) attention weights; a sequence whose keys are all
    masked gives nan, as eager's fused kernel."""
    src, pad = _masks(2, 12)
    pad[1] = True
    mask = {None: None, 0: src, 1: pad, 2: torch.rand(2, 4, 12, 12) < 0.3}[mask_type]
    model = _FusedAttention(need_weights, average, mask_type).eval()
    x = torch.randn(2, 12, 32)
    with torch.no_grad():
        rep = fxc.explain(model, x, mask)
    assert rep.graphs and not _heavy_left(rep), str(rep)
    torch._dynamo.reset()
    with torch.no_grad():
        expected = model(x, mask)
        actual = torch.compile(model, backend="fxc")(x, mask)
    for a, e in zip(actual, expected):
        if e is None:
            assert a is None
            continue
        scale = max(e[e.isfinite()].abs().max().item(), 1.0)
        torch.testing.assert_close(a, e, rtol=0, atol=1e-4 * scale, equal_nan=True)    # nan exactly where eager's
    assert expected[0].isnan().any() == (mask_type == 1)


def test_native_multi_head_attention_over_other_keys():
    """Keys and values another tensor than the queries: the projection's weight splits in three, as in the kernel."""
    model = _FusedAttention(True, True, 1).eval()
    x, kv = torch.randn(2, 12, 32), torch.randn(2, 12, 32)
    pad = _masks(2, 12)[1]
    with torch.no_grad():
        rep = fxc.explain(model, x, pad, kv)
    assert rep.graphs and not _heavy_left(rep), str(rep)
    torch._dynamo.reset()
    check_module(model, x, pad, kv, rtol=0, atol=1e-4)


@pytest.mark.parametrize("kind,kw,given_state", [
    ("lstm", dict(num_layers=2, batch_first=True), False),
    ("lstm", dict(num_layers=2, bidirectional=True), True),
    ("lstm", dict(num_layers=1, bias=False, batch_first=True, bidirectional=True), True),
    ("gru", dict(num_layers=2, bidirectional=True, batch_first=True), False),
    ("gru", dict(num_layers=1, bias=False), True),
    ("rnn", dict(num_layers=2, nonlinearity="tanh", batch_first=True), True),
    ("rnn", dict(num_layers=1, nonlinearity="relu", bidirectional=True), False),
])
def test_recurrent_module_variants(kind, kw, given_state, target):
    """Layers, directions, batch_first, biases on and off, initial states given or zero: all outputs (the sequence
    and the final states) as eager's."""
    torch.manual_seed(2)
    cls = {"lstm": nn.LSTM, "gru": nn.GRU, "rnn": nn.RNN}[kind]
    model = cls(12, 20, **kw).eval()
    layers = kw["num_layers"] * (2 if kw.get("bidirectional") else 1)
    x = torch.randn(3, 7, 12)
    args = (x,)
    if given_state:
        h0 = torch.randn(layers, 7 if not kw.get("batch_first") else 3, 20)
        args = (x, (h0, torch.randn_like(h0)) if kind == "lstm" else h0)
    with _allow_rnn():
        rep = fxc.explain(model, *args, target=target)
        assert rep.graphs and not rep.fallback_ops, str(rep)
        assert f"fxc.{'lstm' if kind == 'lstm' else 'rnn'}.default" in rep.compiled_ops, str(rep)
        torch._dynamo.reset()
        _check_all(model, *args, target=target)


def _check_all(model, *args, target="llvm"):
    """Every tensor of a nested output (an RNN's (out, (h, c))) within 1e-5 x its scale of eager's."""
    from torch.utils._pytree import tree_leaves
    with torch.no_grad():
        expected = model(*args)
        actual = torch.compile(model, backend="fxc", options={"target": target})(*args)
    exp, act = tree_leaves(expected), tree_leaves(actual)
    assert len(exp) == len(act)
    for a, e in zip(act, exp):
        torch.testing.assert_close(a, e, rtol=0, atol=1e-5 * max(e.abs().max().item(), 1.0))


def test_recurrence_is_a_loop_not_unrolled():
    """One rnn_layer kernel per layer and direction, whatever the sequence's length."""
    model = RNNClassifier("lstm", 8, 16, 2, 4).eval()
    counts = []
    with _allow_rnn():
        for steps in (4, 40):
            rep = fxc.explain(model, torch.randn(1, steps, 8))
            counts.append((sum(rep.compiled_ops.values()), sum(": rnn_layer ->" in k for k in rep.kernels)))
    assert counts[0] == counts[1] and counts[0][1] == 2, counts


@pytest.mark.parametrize("kind", ["lstm", "gru"])
def test_recurrent_module_from_torch(kind):
    """fxc.from_torch (torch.export keeps aten.lstm.input / gru.input whole, with no switch needed)."""
    model = RNNClassifier(kind, 8, 16, 2, 4).eval()
    x = torch.randn(2, 9, 8)
    compiled = fxc.from_torch(model, (x,))
    with torch.no_grad():
        expected = model(x)
    torch.testing.assert_close(compiled(x), expected, rtol=0, atol=1e-5)


def test_encoder_from_torch():
    """fxc.from_torch: torch.export's decompositions get the same entries (fxc.capture.torch.backend.keep_whole)."""
    model, inputs = make_standard_model("transformer_encoder", small=True), standard_inputs("transformer_encoder", True)
    compiled = fxc.from_torch(model, inputs)
    with torch.no_grad():
        expected = model(*inputs)
    torch.testing.assert_close(compiled(*inputs), expected, rtol=0, atol=1e-4 * expected.abs().max().item())


def test_unsupported_recurrent_forms_stay_right():
    """An LSTM with projections (proj_size) is not fxc's recurrent op: PyTorch's own decomposition runs instead,
    and the result is eager's."""
    torch.manual_seed(4)
    model = nn.LSTM(6, 10, 2, proj_size=4, batch_first=True).eval()
    with _allow_rnn():
        _check_all(model, torch.randn(2, 5, 6))


def test_explain_notes_a_model_dynamo_did_not_capture():
    """A float causal mask without is_causal=: PyTorch compares the mask's values, Dynamo captures nothing, and the
    model runs in eager PyTorch, right but uncompiled; explain says so. With is_causal=True it compiles."""
    model = _Encoder().eval()
    x = torch.randn(2, 10, 32)
    causal = nn.Transformer.generate_square_subsequent_mask(10)

    class Plain(nn.Module):
        def __init__(self):
            super().__init__()
            self.enc = model.enc

        def forward(self, x, mask):
            return self.enc(x, mask=mask)
    rep = fxc.explain(Plain().eval(), x, causal)
    assert not rep.graphs and any("captured no graph" in n for n in rep.notes), str(rep)
    rep = fxc.explain(model, x, causal)         # _Encoder passes is_causal explicitly
    assert rep.graphs and not rep.fallback_ops and not rep.notes, str(rep)


def test_explain_names_the_switch_for_uncaptured_rnns():
    model, inputs = make_standard_model("gru_classifier", small=True), standard_inputs("gru_classifier", small=True)
    with _allow_rnn(False):
        rep = fxc.explain(model, *inputs)
    assert any("GRU" in n and "torch._dynamo.config.allow_rnn" in n for n in rep.notes), str(rep)
    assert "allow_rnn" in str(rep)
    with _allow_rnn():
        assert not fxc.explain(model, *inputs).notes


def test_recurrent_module_in_a_training_step():
    """With gradients needed, the LSTM goes through PyTorch's own (unrolled) decomposition, which fxc compiles
    forward and backward: gradients as eager's."""
    torch.manual_seed(5)
    model = RNNClassifier("lstm", 6, 8, 2, 3).train()
    twin = RNNClassifier("lstm", 6, 8, 2, 3).train()
    twin.load_state_dict(model.state_dict())
    x = torch.randn(2, 5, 6)
    with _allow_rnn():
        compiled = torch.compile(model, backend="fxc")
        compiled(x).pow(2).sum().backward()
    twin(x).pow(2).sum().backward()
    for p, q in zip(model.parameters(), twin.parameters()):
        torch.testing.assert_close(p.grad, q.grad, rtol=1e-4, atol=1e-5)


def test_harness_takes_the_standard_modules():
    """`python -m benchmarks.run --models transformer_encoder:1` (any standard name) meets the peers with the family's
    model and input, at batch 1; a model with recurrent modules turns on Dynamo's allow_rnn, as its user would."""
    from benchmarks.run import count_flops, make_workload
    with _allow_rnn(False):
        model, inputs = make_workload("gru_classifier", 1, 128)
        assert torch._dynamo.config.allow_rnn
    ref, ref_inputs = make_standard_model("gru_classifier"), standard_inputs("gru_classifier")
    assert all(torch.equal(a, b) for a, b in zip(inputs, ref_inputs))
    with torch.no_grad():
        assert torch.equal(model(*inputs), ref(*ref_inputs))
    model, inputs = make_workload("transformer_encoder", 1, 128)
    assert tuple(inputs[0].shape) == (1, 128, 256) and len(model.layers) == 4
    assert count_flops(model, inputs) >= 4 * 2 * 128 * 256 * 256 * 12    # its projections and FFNs, not 0
    with pytest.raises(SystemExit, match="batch 1 only"):
        make_workload("mha", 2, 128)
