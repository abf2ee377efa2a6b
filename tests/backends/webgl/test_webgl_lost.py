"""webgl never returns a wrong answer: selects render without `?:` (SwiftShader's compiler hung on a chain of them in
a conv2d_packed loop: the draw never returned, the context was lost and the call read zeros), exact for NaN / inf /
-0.0 and ints; a lost WebGL context is a DeviceLostError, never zeros, and the next call (of that module or another)
runs in a fresh context."""
import numpy as np
import pytest

from fxc.driver.build import build
from fxc.errors import DeviceLostError
from fxc.ops.registry import all_ops
from fxc.relay_like.builder import Builder
from fxc.runtime.browser.webgl import open_page, program_of
from tests.helpers import assert_close_np

LOSE = "() => window.fxcBase.gl.getExtension('WEBGL_lose_context').loseContext()"
# the next read-back of any model loses the context first (a draw that never returns, as SwiftShader's did)
LOSE_IN_NEXT_CALL = """() => { const read = FxcWebGL.prototype.read;
  FxcWebGL.prototype.read = function (...a) {
    FxcWebGL.prototype.read = read; this.gl.getExtension("WEBGL_lose_context").loseContext();
    return read.apply(this, a);
  }; }"""


def _exp_model(scale: float, n: int = 3000):
    b = Builder()
    v = b.graph.input((n,), "float32")
    b.graph.outputs = [b.call("exp", [b.call("mul", [v, scale])])]
    return build(b.graph, target="webgl")


def test_conv2d_packed_with_a_partial_block_runs():
    """conv2d_packed sample 3 (33 output channels: 8 blocks of 4 + 1, nv = 3) came back as zeros with the context
    lost: its loop body picked 32 components by `?:` chains. Its shader has no ternary now, and it is right."""
    op = all_ops()["conv2d_packed"]
    arrays, attrs = op.samples(np.random.default_rng(3))[3]
    assert attrs["out_channels"] == 33
    b = Builder()
    ins = [b.graph.input(a.shape, str(a.dtype)) for a in arrays]
    b.graph.outputs = list(b.graph.call("conv2d_packed", ins, **attrs))
    m = build(b.graph, target="webgl")
    for k in program_of(m.source)["kernels"].values():
        assert "?" not in k["shader"]
    assert_close_np(m(*arrays), op.reference(*arrays, **attrs))


@pytest.mark.parametrize("dtype", ["float32", "int32", "bool"])
def test_selects_are_exact(dtype):
    """where(c, a, b) renders as mix(b, a, c) (floats: a select by a bool, NaN / inf / -0.0 kept), a mask (ints)."""
    rng = np.random.default_rng(0)
    n = 64
    c = rng.random(n) < 0.5
    if dtype == "float32":
        special = np.array([np.nan, np.inf, -np.inf, -0.0, 0.0, 3.0e38, -1e-45, 1.0], np.float32)
        a, b = rng.choice(special, n).astype(np.float32), rng.choice(special, n).astype(np.float32)
    elif dtype == "int32":
        a = rng.integers(-2 ** 31, 2 ** 31, n, dtype=np.int64).astype(np.int32)
        b = rng.integers(-2 ** 31, 2 ** 31, n, dtype=np.int64).astype(np.int32)
    else:
        a, b = rng.random(n) < 0.5, rng.random(n) < 0.5
    g = Builder()
    vs = [g.graph.input((n,), str(x.dtype)) for x in (c, a, b)]
    g.graph.outputs = [g.call("where", vs)]
    m = build(g.graph, target="webgl")
    shader = "\n".join(k["shader"] for k in program_of(m.source)["kernels"].values())
    assert " ? " not in shader.split("void main()")[1]
    got, want = np.asarray(m(c, a, b)), np.where(c, a, b)
    assert got.dtype == want.dtype
    if dtype == "float32":      # bit for bit: NaN where NaN, the sign of a zero kept
        assert np.array_equal(got.view(np.int32)[~np.isnan(want)], want.view(np.int32)[~np.isnan(want)])
        assert np.array_equal(np.isnan(got), np.isnan(want))
    else:
        assert np.array_equal(got, want)


def test_context_lost_during_a_call_is_an_error_and_the_next_call_recovers():
    """A context lost while a call runs (its read-back reads zeros) is a DeviceLostError naming the draws; the same
    module's next call and a new module run in a fresh page, right."""
    x = np.linspace(-1, 1, 3000).astype(np.float32)
    m = _exp_model(2.0)
    assert_close_np(m(x), np.exp(2 * x))
    first = open_page()
    first.call(LOSE_IN_NEXT_CALL)
    with pytest.raises(DeviceLostError, match="the WebGL context was lost while running the plan .*k0_") as e:
        m(x)
    assert "fresh context" in str(e.value) and "another target" in str(e.value)
    assert first.lost
    assert_close_np(m(x), np.exp(2 * x))                    # loads itself into a fresh page
    assert open_page() is not first and not open_page().call("() => window.fxcBase.gl.isContextLost()")
    assert_close_np(_exp_model(3.0)(x), np.exp(3 * x))


def test_a_profiled_call_names_the_draw_that_lost_the_context():
    """With profile=True each draw is waited for, so the error names the kernel whose draw lost the context."""
    x = np.linspace(-1, 1, 3000).astype(np.float32)
    b = Builder()
    v = b.graph.input(x.shape, "float32")
    b.graph.outputs = [b.call("exp", [b.call("mul", [v, 0.25])])]
    m = build(b.graph, target="webgl", profile=True)
    assert_close_np(m(x), np.exp(0.25 * x))
    open_page().call("""() => { const gl = window.fxcBase.gl, draw = gl.drawArrays;
      gl.drawArrays = function (...a) {
        gl.drawArrays = draw; draw.apply(gl, a); gl.getExtension('WEBGL_lose_context').loseContext(); }; }""")
    with pytest.raises(DeviceLostError, match="the WebGL context was lost while running kernel k0_"):
        m(x)
    assert_close_np(m(x), np.exp(0.25 * x))


def test_context_lost_between_calls_is_recovered():
    """A context lost when nothing of fxc's was running (the browser reclaiming the GPU): the next call and the next
    build load into a fresh page and return the right values, without an error."""
    x = np.linspace(-1, 1, 3000).astype(np.float32)
    m = _exp_model(0.5)
    assert_close_np(m(x), np.exp(0.5 * x))
    open_page().call(LOSE)
    assert_close_np(m(x), np.exp(0.5 * x))
    open_page().call(LOSE)
    assert_close_np(_exp_model(1.5)(x), np.exp(1.5 * x))    # a build in a lost page: loaded afresh
    assert_close_np(m(x), np.exp(0.5 * x))


def test_a_select_of_a_refused_dtype_falls_back():
    """householder_product's sample 0 has float64 selects inside a group: WebGL refuses the group (a LoweringError the
    fallback catches: it runs as wasm kernels) rather than crash on rendering the select (a KeyError did)."""
    op = all_ops()["householder_product"]
    arrays, attrs = op.samples(np.random.default_rng(0))[0]
    b = Builder()
    ins = [b.graph.input(a.shape, str(a.dtype)) for a in arrays]
    b.graph.outputs = list(b.graph.call("householder_product", ins, **attrs))
    assert_close_np(build(b.graph, target="webgl")(*arrays), op.reference(*arrays, **attrs))
