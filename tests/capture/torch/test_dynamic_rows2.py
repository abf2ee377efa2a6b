"""Row blocks over two symbols (issue 26 item 3, fxc/lowering/blocks.py): a group whose tensors' leading symbolic
dims multiply to one product (a batch x a sequence: [b, s, 64], [b*s, 64]) runs the static register tiles on
blocks of that product's rows, as one symbol's rows do; compared with eager / numpy at several (b, s), one build."""
import numpy as np
import pytest
import torch
from torch import nn
from torch.export import Dim

import fxc
import fxc.driver.build as BUILD
from fxc.errors import LoweringError
from fxc.lowering.blocks import group_rows, row_layout
from fxc.relay_like.graph import Graph
from fxc.symbolic.expr import Sym
from fxc.symbolic.sym import SymInfo, canonical

B, S = Sym("b"), Sym("s")


def close(out, ref):
    out, ref = np.asarray(out), np.asarray(ref)
    assert out.shape == ref.shape
    assert np.abs(out - ref).max() <= 1e-4 * max(float(np.abs(ref).max()), 1.0), np.abs(out - ref).max()


def test_row_layout_of_a_product_of_symbols():
    assert row_layout((B, S, 64), (B, S)) == ((0, 1), 64)
    assert row_layout((1, B, 1, S, 4, 8), (S, B)) == ((1, 3), 32)
    assert row_layout((canonical(B * S), 64), (B, S)) == ((0,), 64)
    assert row_layout((canonical(B * S * 2), 64), (B, S)) == ((0,), 128)
    assert row_layout((3, 64), (B, S)) is None
    for bad in ((B, 2, S, 32), (B, 64), (S, S, 4), (B, S, S)):
        with pytest.raises(LoweringError):
            row_layout(bad, (B, S))
    assert row_layout((S, 64), S) == ((0,), 64)            # one symbol, as before


class Block(nn.Module):
    """A transformer's token-wise half: linear, GELU, linear, residual, layer norm over [b, s, d]."""

    def __init__(self, d=48, h=80):
        super().__init__()
        self.up, self.down, self.norm = nn.Linear(d, h), nn.Linear(h, d), nn.LayerNorm(d)

    def forward(self, x):
        return self.norm(x + self.down(torch.nn.functional.gelu(self.up(x))))


def test_two_symbols_run_as_row_blocks():
    torch.manual_seed(0)
    model = Block().eval()
    before, rows, loops = BUILD.stats["builds"], BUILD.stats["row_block_kernels"], BUILD.stats["symbolic_loop_kernels"]
    x = torch.randn(2, 5, 48)
    compiled = fxc.from_torch(model, (x,), dynamic_shapes=({0: Dim("b", min=1, max=16), 1: Dim("s", min=1, max=80)},))
    assert BUILD.stats["builds"] == before + 1
    assert BUILD.stats["row_block_kernels"] > rows and BUILD.stats["symbolic_loop_kernels"] == loops
    with torch.no_grad():
        for b, s in ((2, 5), (1, 1), (3, 7), (16, 80), (5, 13), (1, 64), (4, 16), (2, 12)):  # blocks of 64, 16, 8, 1
            x = torch.randn(b, s, 48, generator=torch.Generator().manual_seed(b * 100 + s))
            close(compiled(x), model(x))
    assert BUILD.stats["builds"] == before + 1


def test_rows_of_a_flattened_product_and_a_split():
    """[b, s, 16] -> [b*s, 16] -> matmul -> [b, s, 2, 12]: rows kept through reshapes (a graph built by hand)."""
    g = Graph()
    x = g.input((B, S, 16), "float32", "x")
    w = g.input((16, 24), "float32", "w")
    flat = g.call1("reshape", [x], shape=(canonical(B * S), 16))
    y = g.call1("relu", [g.call1("matmul", [flat, w])])
    g.outputs = [g.call1("reshape", [y], shape=(B, S, 2, 12))]
    g.symbols = {"b": SymInfo("b", 1, 9), "s": SymInfo("s", 1, 70)}
    loops = BUILD.stats["symbolic_loop_kernels"]
    module = BUILD.build(g)
    assert BUILD.stats["symbolic_loop_kernels"] == loops
    rng = np.random.default_rng(0)
    wv = rng.standard_normal((16, 24)).astype(np.float32)
    for b, s in ((1, 3), (9, 70), (2, 33), (4, 2)):
        xv = rng.standard_normal((b, s, 16)).astype(np.float32)
        close(module(xv, wv), np.maximum(xv.reshape(b * s, 16) @ wv, 0).reshape(b, s, 2, 12))


def test_group_rows_refuses_mixed_products():
    class G:
        def __init__(self, *shapes):
            self.inputs = [type("V", (), {"shape": sh})() for sh in shapes]
            self.nodes = []
    assert group_rows(G((B, S, 8), (canonical(B * S), 8), (8, 8))) == tuple(sorted((B, S), key=repr))
    with pytest.raises(LoweringError):
        group_rows(G((B, S, 8), (S, 8)))        # a position table [s, d] added to [b, s, d]: not the same rows


def test_reshape_of_a_product_of_symbols_keeps_its_runs():
    """[b*s, 64] -> [b, s, 2, 32] (BERT's heads): the runs (b, s | b*s) and (2, 32 | 64) index apart, so the input
    row is i0 * s + i1 (no division of the whole flat index by 64, modulo b*s: K^T 54 -> 7 us at 4 x 128)."""
    from fxc.ops.movement import reshape_groups, reshape_index
    from fxc.symbolic.expr import Var, walk
    bs = canonical(B * S)
    assert reshape_groups((B, S, 2, 32), (bs, 64)) == [([0, 1], [0]), ([2, 3], [1])]
    assert reshape_groups((bs, 64), (B, S, 2, 32)) == [([0], [0, 1]), ([1], [2, 3])]
    row, _ = reshape_index([Var(f"i{k}") for k in range(4)], (B, S, 2, 32), (bs, 64))
    assert not any(getattr(x, "args", (None,))[0] in ("idiv", "imod") for x in walk(row))
    with pytest.raises(TypeError):      # the order of s and b depends on the sizes: one run (the caller's fallback)
        reshape_groups((S, B), (B, S))
