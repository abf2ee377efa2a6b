"""Symbolic dims that are not the leading one, and several symbols (issue 26): attention's [1, h, s, s], GEMMs whose
N or K is the sequence, transposes of symbolic shapes, a batch and a sequence together; BERT and
nn.TransformerEncoder with a dynamic sequence length built once (fxc/lowering/sym_loops.py)."""
import numpy as np
import pytest
import torch
from torch.export import Dim

import fxc
import fxc.driver.build as BUILD
from fxc.relay_like.graph import Graph
from fxc.symbolic.expr import Sym, facts, less
from fxc.symbolic.sym import SymInfo


def builds() -> int:
    return BUILD.stats["builds"]


def close(out, ref, scale_tol=1e-4):
    """Equal to eager within 1e-4 x the output's scale (issue 26's tolerance)."""
    out = torch.as_tensor(out)
    scale = max(float(ref.abs().max()), 1.0)
    assert out.shape == ref.shape
    assert float((out - ref).abs().max()) <= scale_tol * scale, float((out - ref).abs().max())


def test_symbol_ranges_order_dims():
    s = Sym("seq")
    with pytest.raises(TypeError):
        less(s, 129)                        # s >= 1 only: depends on the size
    with facts({"seq": SymInfo("seq", 2, 128)}):
        assert less(s, 129) and not less(s, 2) and less(1, s)
        with pytest.raises(TypeError):
            less(s, 64)
    assert less(s, s * 2) and not less(s * 2, s)


class Two(torch.nn.Module):
    def __init__(self, f):
        super().__init__()
        self.f = f

    def forward(self, x, y):
        return self.f(x, y)


class One(Two):
    def forward(self, x):
        return self.f(x)


SEQ = Dim("seq", min=2, max=64)
# name: (function, input shapes at s = 16, which dims are the sequence)
PIECES = {
    "split_heads": (lambda x: x.view(1, x.shape[1], 2, 4).permute(0, 2, 1, 3).contiguous() * 2,
                    [(1, 16, 8)], [{1: SEQ}]),
    "scores": (lambda q, k: torch.matmul(q, k.transpose(-1, -2)) / 3.0, [(1, 2, 16, 8), (1, 2, 16, 8)],
               [{2: SEQ}, {2: SEQ}]),
    "context": (lambda p, v: torch.matmul(p, v), [(1, 2, 16, 16), (1, 2, 16, 40)], [{2: SEQ, 3: SEQ}, {2: SEQ}]),
    "masked_softmax": (lambda x, m: torch.softmax(x + (1.0 - m[:, None, None, :]) * -10000.0, -1),
                       [(1, 2, 16, 16), (1, 16)], [{2: SEQ, 3: SEQ}, {1: SEQ}]),
    "sum_over_seq": (lambda x: x.sum(1) + x.amax(1), [(2, 16, 8)], [{1: SEQ}]),
    "merge_heads": (lambda x: x.permute(0, 2, 1, 3).reshape(1, x.shape[2], 24), [(1, 2, 16, 12)], [{2: SEQ}]),
}


@pytest.mark.parametrize("name", sorted(PIECES))
def test_kernel_with_a_symbolic_inner_dim_builds_once(name):
    f, shapes, dims = PIECES[name]
    model = (One if len(shapes) == 1 else Two)(f)
    g = torch.Generator().manual_seed(0)

    def inputs(s):
        return tuple(torch.randn(*[s if k in d else n for k, n in enumerate(sh)], generator=g)
                     for sh, d in zip(shapes, dims))
    before = builds()
    compiled = fxc.from_torch(model, inputs(16), dynamic_shapes=tuple(dims))
    assert builds() == before + 1
    for s in (16, 5, 37, 64):
        a = inputs(s)
        close(compiled(*a), f(*a))


def test_plan_with_a_square_of_the_symbol_and_two_symbols():
    b, s = Sym("b"), Sym("s")
    g = Graph()
    x = g.input((b, s, 8), "float32", "x")
    scores = g.call1("matmul", [x, x], trans_b=True)                 # [b, s, s]
    y = g.call1("matmul", [g.call1("softmax", [scores], dim=-1), x])  # [b, s, 8]
    g.outputs = [g.call1("add", [y, x])]
    g.symbols = {"b": SymInfo("b", 1, 4), "s": SymInfo("s", 1, 50)}
    module = BUILD.build(g)
    assert [d["name"] for d in module.symbols] == ["b", "s"]
    rng = np.random.default_rng(0)
    for shape in ((1, 3, 8), (4, 50, 8), (2, 17, 8)):
        xv = rng.standard_normal(shape).astype(np.float32)
        t = torch.from_numpy(xv)
        ref = torch.softmax(t @ t.transpose(1, 2), -1) @ t + t
        close(module(xv), ref)


def _bert_small():
    from fxc.testing.models import bert_encoder
    torch.manual_seed(0)
    return bert_encoder(vocab=1000, hidden=64, layers=2, heads=2, intermediate=128).eval()


def _bert_inputs(b, s):
    g = torch.Generator().manual_seed(b * 1000 + s)
    ids = torch.randint(0, 1000, (b, s), generator=g)
    mask = torch.ones(b, s, dtype=torch.long)
    mask[0, s - s // 4:] = 0
    return ids, mask


def test_bert_encoder_dynamic_sequence_builds_once():
    model = _bert_small()
    compiled = torch.compile(model, backend="fxc", dynamic=True)
    before = builds()
    with torch.no_grad():
        for s in (16, 37, 128, 23):            # the position table stops at 128
            a = _bert_inputs(1, s)
            close(compiled(*a), model(*a))
    assert builds() == before + 1


def test_transformer_encoder_dynamic_sequence_builds_once():
    from fxc.testing.standard import transformer_encoder
    torch.manual_seed(0)
    model = transformer_encoder(d=64, heads=2, ffn=128, layers=2).eval()
    compiled = torch.compile(model, backend="fxc", dynamic=True)
    before = builds()
    with torch.no_grad():
        for s in (16, 100, 512, 45):
            x = torch.randn(1, s, 64, generator=torch.Generator().manual_seed(s))
            close(compiled(x), model(x))
    assert builds() == before + 1


def test_torch_compile_batch_and_sequence_builds_once():
    """torch.compile(dynamic=True) of BERT called with varying batch AND sequence length: both stay symbolic (the
    partition's placeholders include products like s0 * s1, the sizes of its views), one build for every pair
    (batches >= 2: Dynamo specialises a batch of 1 into a graph of its own)."""
    model = _bert_small()
    compiled = torch.compile(model, backend="fxc", dynamic=True)
    before = builds()
    with torch.no_grad():
        for b, s in ((2, 16), (3, 37), (4, 128), (2, 23), (5, 9)):
            a = _bert_inputs(b, s)
            close(compiled(*a), model(*a))
    assert builds() == before + 1


def test_from_torch_with_a_batch_and_a_sequence_dim():
    model = _bert_small()
    batch, seq = Dim("batch", min=1, max=8), Dim("seq", min=2, max=128)
    before = builds()
    compiled = fxc.from_torch(model, _bert_inputs(2, 16), dynamic_shapes=({0: batch, 1: seq}, {0: batch, 1: seq}))
    assert builds() == before + 1
    assert len(compiled.module.symbols) == 2        # (named by the shape environment)
    with torch.no_grad():
        for b, s in ((2, 16), (3, 37), (1, 128), (5, 9)):
            a = _bert_inputs(b, s)
            close(compiled(*a), model(*a))
    with pytest.raises(fxc.errors.InputError, match="outside the compiled range"):
        compiled(*_bert_inputs(9, 16))


# a fixed sample of registry ops with their last dim symbolic (the whole registry: python -m
# fxc.testing.symbolic_ops --last)
LAST_DIM_OPS = ["add", "matmul", "softmax", "layer_norm", "sum", "permute", "reshape", "where", "gather"]


@pytest.mark.parametrize("name", LAST_DIM_OPS)
def test_registry_op_with_a_symbolic_last_dim(name):
    from fxc.testing.symbolic_ops import cases, check_symbolic
    results = [check_symbolic(name, k, last=True) for n, k in cases() if n == name]   # AssertionError when wrong
    assert results and all(r.startswith(("symbolic", "per size:")) for r in results)
    if name in ("add", "softmax", "layer_norm", "sum"):
        assert results[0] == "symbolic", results
