"""The C-like renderers' names (fxc/backends/cstyle.py): one name table per kernel, so a loop-IR name never
shadows a renderer-made one (GLSL's parameter offsets `o<j>`, temporaries `t<N>`), and a render-time check that
no declared name is declared again in a scope that sees it (issue 41, item 1)."""
import itertools

import pytest
import torch

import fxc
from fxc.backends.cstyle import CStyleRenderer
from fxc.backends.glsl import render_glsl
from fxc.backends.opencl.render import render_opencl
from fxc.backends.webgpu.wgsl import render_wgsl
from fxc.errors import LoweringError
from fxc.lowering.loop_ir import Buffer, For, Kernel, Launch, Store, seq
from fxc.symbolic import expr
from fxc.symbolic.expr import Const, Var


class SoftmaxPlusSum(torch.nn.Module):
    def forward(self, x):
        return torch.softmax(x, -1) * 2 + x.sum(-1, keepdim=True)


@pytest.mark.targets("opencl", "opengl", "webgl", "webgpu", "wasm")
@pytest.mark.parametrize("shape", [(1, 3), (3, 5), (2, 7), (4, 1)])
def test_loop_variable_named_like_an_offset(target, shape, monkeypatch):
    """The issue's model. Loop-IR variables are numbered from 0 in a fresh process, and the softmax's row loop
    (the first variable a compile makes) was then `o0`, the name of the first parameter's offset in GLSL: stores
    went to arena word 0 (the result off by 1000, or a false int64 error). The numbering is restarted here, and
    the module cache is off, so that every run lowers and names its kernels as a fresh process does."""
    monkeypatch.setenv("FXC_MODULE_CACHE", "0")
    monkeypatch.setattr(expr, "_var_ids", itertools.count())
    x = torch.randn(*shape, generator=torch.Generator().manual_seed(sum(shape)))
    x[0, 0] = -1000
    got = fxc.from_torch(SoftmaxPlusSum(), (x,), target=target)(x)
    torch.testing.assert_close(got, SoftmaxPlusSum()(x), rtol=1e-5, atol=1e-4)


def _kernel(loop_var: Var, inner: Var | None = None) -> Kernel:
    """out[i] = x[i] + 1 over 4 elements in one work-item, the loop's variable given (inner: a second loop inside,
    over a variable given too)."""
    out, x = Buffer("out", "float32", 4), Buffer("x", "float32", 4)
    body = Store(out, loop_var, x[loop_var] + Const(1.0, "float32"))
    if inner is not None:
        body = For(inner, 1, body)
    g, th = Var("g"), Var("th")
    loops = For(g, 1, For(th, 1, For(loop_var, 4, body), "thread"), "grid")
    return Kernel("k", [out, x], loops, index_bits=32, launch=Launch((1,), (1,)))


def _declarations(text: str, name: str) -> int:
    return sum(text.count(f"{kw} {name} ") + text.count(f"{kw} {name}:") for kw in ("int", "var", "let", "long"))


@pytest.mark.parametrize("render", [render_glsl, render_wgsl, render_opencl])
def test_loop_variables_never_take_a_renderer_name(render):
    """A loop variable named o0 (GLSL / WGSL: parameter 0's offset) or t1 (a temporary) is renamed, never
    declared over the renderer's name."""
    for name in ("o", "t"):
        text = render([_kernel(Var(name, "int64", 0 if name == "o" else 1))])
        for n in ("o0", "t1", "v_o0", "v_t1"):
            assert _declarations(text, n) <= 1, (n, text)


@pytest.mark.parametrize("render", [render_glsl, render_wgsl, render_opencl])
def test_a_name_declared_again_where_it_is_seen_is_an_error(render):
    """Loop IR that declares one variable inside its own loop (the inner declaration would shadow the outer)
    is refused at render time, naming the variable."""
    v = Var("k", "int64", 7)
    with pytest.raises(LoweringError, match="k7.*declared again"):
        render([_kernel(v, inner=v)])


def test_declare_checks_the_scopes_that_see_a_name():
    r = CStyleRenderer.__new__(CStyleRenderer)
    r.kernel = Kernel("k", [], seq())
    r.env, r.scopes, r.declared = [{}], [set()], set()
    r.declare("a")
    r.enter(declare=("b",))
    with pytest.raises(LoweringError, match="the name a is declared again"):
        r.declare("a")
    r.leave()
    r.enter(declare=("b",))             # a sibling scope: b is not seen there
    r.leave()
    with pytest.raises(LoweringError, match="the name b is declared again"):
        r.declare("b", top=True)        # the kernel's top comes before the body, which declared b
