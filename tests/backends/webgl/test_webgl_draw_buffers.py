"""Fragments that write four texels (draw buffers, fxc/backends/webgl/draw_buffers.py) on the webgl target, against
eager
PyTorch: matmuls with their epilogues (bias, gelu, a residual), a batched matmul, channel-blocked convolutions, the
parts whole texture rows, all in one row, or starting within a row; a 3x3 conv's parts by output pixel (runs
within a channel block: the weight texels shared); which kernels get render targets and which do not; the fetches a
jammed matmul's and conv's inner loops make; the copies' folded index math (numpy); export, fxc.load and the static
package. Runs
in the headless Chromium page (one per test process), small shapes."""
import json
import re

import numpy as np
import pytest
import torch
from torch import nn

import fxc
from fxc.runtime.browser.webgl import program_of
from tests.helpers import assert_close_np


class _LinearGeluResidual(nn.Module):
    def __init__(self, k, n):
        super().__init__()
        self.lin = nn.Linear(k, n)

    def forward(self, x, r):
        return nn.functional.gelu(self.lin(x)) + r


class _Bmm(nn.Module):
    def forward(self, q, k):
        return torch.softmax(q @ k.transpose(-1, -2) / 4.0, -1) @ k


CASES = {       # name: (model, input shapes, whether a kernel gets draw buffers: True, False, None: either)
    "linear_gelu_residual_rows": (lambda: _LinearGeluResidual(64, 32), [(64, 64), (64, 32)], True),
    "linear_one_row": (lambda: nn.Linear(64, 32), [(8, 64)], True),
    "linear_no_bias_k40": (lambda: nn.Linear(40, 64, bias=False), [(32, 40)], True),
    "linear_parts_within_rows": (lambda: nn.Linear(64, 20), [(48, 64)], True),     # parts of 60 texels, rows of 64
    "linear_parts_straddle_rows": (lambda: nn.Linear(64, 24), [(18, 64)], None),   # a part: 4.5 rows of C
    "conv1x1_blocked": (lambda: nn.Sequential(nn.Conv2d(16, 16, 1), nn.ReLU()), [(1, 16, 6, 6)], True),
    "conv1x1_7x7_not_cut": (lambda: nn.Conv2d(16, 16, 1), [(1, 16, 7, 7)], False),  # only channel blocks: 17/20
    "conv3x3_blocked": (lambda: nn.Conv2d(8, 16, 3, padding=1), [(1, 8, 10, 10)], True),
    "attention_bmm": (_Bmm, [(2, 32, 16), (2, 32, 16)], None),
    "linear_rows_not_cut": (lambda: nn.Linear(64, 12), [(6, 64)], False),  # 72 outputs: no cut in 4 parts of texels
    "elementwise": (lambda: nn.GELU(), [(64, 64)], False),                   # no reduction: nothing to share
}


@pytest.mark.parametrize("name", list(CASES))
def test_draw_buffers_match_eager(name):
    make, shapes, least = CASES[name]
    torch.manual_seed(0)
    model = make().eval()
    xs = [torch.randn(s) for s in shapes]
    with torch.no_grad():
        expected = model(*xs).numpy()
    compiled = fxc.from_torch(model, tuple(xs), target="webgl")
    kernels = program_of(compiled.module.source)["kernels"]
    with_targets = [n for n, k in kernels.items() if k.get("targets", 1) > 1]
    assert least is None or bool(with_targets) == least, (name, with_targets)
    for n in with_targets:
        assert kernels[n]["targets"] == 4 and "fxc_out3" in kernels[n]["shader"]
    got = compiled(*[x.numpy() for x in xs])
    assert got.shape == expected.shape
    assert_close_np(got, expected, rtol=1e-5, atol=1e-5 * max(1.0, float(np.abs(expected).max())))


def test_jammed_matmul_fetches_eight_texels_for_sixty_four_multiply_adds():
    """A linear layer of 64 rows: a fragment computes rows m, m + 16, m + 32, m + 48 of four columns; each step of
    its reduction loop (four k) fetches one activation texel per row and one weight texel per column, shared by the
    four rows (one target: 5 fetches for 16 multiply-adds)."""
    torch.manual_seed(0)
    model, x = nn.Linear(32, 16).eval(), torch.randn(64, 32)
    compiled = fxc.from_torch(model, (x,), target="webgl")
    (k,) = program_of(compiled.module.source)["kernels"].values()
    assert k["targets"] == 4 and k["split"] * 4 * 4 == 64 * 16
    loop = re.search(r"for \(int \w+ = 0; \w+ < 32; \w+ \+= 4\) \{(.*?)\n    \}", k["shader"], re.S).group(1)
    assert loop.count("texelFetch(") == 8, loop
    with torch.no_grad():
        assert_close_np(compiled(x.numpy()), model(x).numpy(), rtol=1e-5, atol=1e-5)


def test_program_without_targets_still_loads():
    """A program of an earlier build (no "targets" in its kernels) lays out and runs as before."""
    from fxc.runtime.browser.webgl import layout
    program = {"width": 64, "lanes": 4, "kernels": {"k": {"shader": "", "output": 0, "params": [["float32", 8]]}}}
    desc = layout(program, [], [], [], [])
    assert json.loads(json.dumps(desc))["kernels"]["k"] == {"shader": "", "output": 0, "targets": 1, "split": 0}


def test_draw_buffers_export_load_and_static_package(tmp_path):
    """A model with draw-buffer kernels exported: `fxc.load` runs it, and its static package (fxc web) runs in the
    page with the same runtime.js, both matching eager."""
    from fxc.deploy.web import serve, write_package
    from tests.deploy.test_web_package import _open
    torch.manual_seed(0)
    model = _LinearGeluResidual(64, 32).eval()
    x, r = torch.randn(64, 64), torch.randn(64, 32)
    with torch.no_grad():
        expected = model(x, r).numpy()
    compiled = fxc.from_torch(model, (x, r), target="webgl")
    assert any(k.get("targets", 1) == 4 for k in program_of(compiled.module.source)["kernels"].values())
    path = fxc.export(compiled, tmp_path / "m.fxc")
    tol = dict(rtol=1e-5, atol=1e-5 * max(1.0, float(np.abs(expected).max())))
    assert_close_np(fxc.load(path)(x.numpy(), r.numpy()), expected, **tol)
    index = write_package(path, tmp_path / "site", inputs=[x.numpy(), r.numpy()], runs=1)
    with serve(index.parent) as server:
        page, got = _open(server.url)
        page.close()
    assert got["state"] == "done", got["status"]
    assert_close_np(np.asarray(got["outputs"][0], np.float32).reshape(expected.shape), expected, **tol)


def test_conv3x3_parts_by_output_pixel_share_the_weight_texels():
    """A blocked 3x3 conv (16 -> 16 channels at 8x8): the four parts are runs of 16 output pixels of every channel
    block ("block": 16 texels), so the copies share every weight texel: a step of the unrolled four-channel loop
    fetches 4 input texels and 4 weight texels for 64 multiply-adds (the output's quarters, channel blocks sharing
    the input texel: 17)."""
    torch.manual_seed(0)
    model, x = nn.Conv2d(16, 16, 3, padding=1).eval(), torch.randn(1, 16, 8, 8)
    compiled = fxc.from_torch(model, (x,), target="webgl")
    (k,) = [k for k in program_of(compiled.module.source)["kernels"].values() if k.get("targets", 1) > 1]
    assert k["targets"] == 4 and k["split"] == 64 and k["block"] == 16, {n: k[n] for n in ("split", "block")}
    step = re.search(r"for \(int r\w* = 0; r\w* < 3; \+\+r\w*\) \{\n(?:(?!for \().)*?\{\n(.*?)\n {10}\}", k["shader"],
                     re.S)
    assert step is not None and step.group(1).count("texelFetch(") == 8, k["shader"]
    with torch.no_grad():
        assert_close_np(compiled(x.numpy()), model(x).numpy(), rtol=1e-5, atol=1e-5)


def test_copies_index_math_is_exact():
    """Each copy's simplified // and % (pulled-out multiples, intervals) equal the original index math at the
    copy's work-item, for every fragment work-item and cut (numpy)."""
    from fxc.backends.webgl import draw_buffers as wt
    from fxc.lowering.expr import Const, Var, binary
    from fxc.lowering.loop_ir import Kernel, Seq

    def ev(e, env):
        if isinstance(e, Const):
            return np.int64(e.value)
        if isinstance(e, Var):
            return env[e]
        op, a, b = e.args
        f = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "idiv": np.floor_divide, "imod": np.mod}[op]
        return f(ev(a, env), ev(b, env))
    g = Var("g", "int64")
    c = lambda v: Const(v, "int64")        # noqa: E731
    n, H, W, CB = 2 * 4 * 10 * 12 * 4, 10, 12, 4          # NCHW4c, batch 2
    pix = binary("idiv", g, c(4))
    exprs = [binary("imod", binary("idiv", pix, c(W)), c(H)), binary("imod", pix, c(W)), binary("imod", g, c(4)),
             binary("imod", binary("idiv", binary("idiv", pix, c(W)), c(H)), c(CB)),
             binary("idiv", binary("idiv", binary("idiv", pix, c(W)), c(H)), c(CB)),
             binary("add", binary("mul", binary("imod", binary("idiv", pix, c(W)), c(H)), c(3)), c(-1))]
    for block in (n // 4, H * W, W * 4, 8):
        part = n // 4
        bounds = wt._Bounds(Kernel("k", [], Seq([])), strict=False)
        bounds.vars[g] = (0, part - 1)
        q = np.arange(part, dtype=np.int64)
        for r, at in enumerate(wt._cut(g, 4, n, block)):
            copy = wt._Copy(r, g, at, bounds, Seq([]), {})
            gr = ev(at, {g: q})
            assert sorted(set(gr.tolist())) == sorted(gr.tolist()) and gr.max() < n
            for e in exprs:
                np.testing.assert_array_equal(ev(copy.expr(e), {g: q}), ev(e, {g: gr}), err_msg=f"{block} {r} {e}")


class _LinearBesideATable(nn.Module):
    """A linear layer beside an embedding table big enough that the textures are 256 texels wide: the linear's
    draw-buffer parts (one texture row each) are drawn as tiles (fxc.backends.webgl.program.part_tiles)."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(256, 64)
        self.table = nn.Embedding(1100, 1024)

    def forward(self, x, ids):
        return self.lin(x), self.table(ids)


def test_parts_of_few_rows_drawn_as_tiles_match_eager():
    torch.manual_seed(0)
    m = _LinearBesideATable().eval()
    x, ids = torch.randn(64, 256), torch.tensor([3, 1099, 0])
    compiled = fxc.from_torch(m, (x, ids), target="webgl")
    kernels = program_of(compiled.module.source)["kernels"]
    assert program_of(compiled.module.source)["width"] == 256
    tiled = [k for k in kernels.values() if k.get("tiles")]
    assert tiled and tiled[0]["tiles"] == 4 and tiled[0]["split"] == 256      # a part: 1 row of 256 -> 4 x 64
    with torch.no_grad():
        want = m(x, ids)
    for _ in range(2):          # the part textures are reused by the second call
        got = compiled(x.numpy(), ids.numpy())
        for g, w in zip(got, want):
            assert_close_np(np.asarray(g), w.numpy())
