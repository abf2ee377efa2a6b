"""What only the OpenGL target (Mesa llvmpipe through EGL here) has: the loop-IR fixture on the GLSL renderer, GLSL's
float32 math helpers against numpy, int64 arithmetic refused, and the GL error cases. The cases every device target
shares (the fixed op sample, the reference models, weights kept on the device, export and load, int64 indices in 32
bits...) are in tests/backends/test_every_target.py.

A missing GL runtime is a failure, not a skip (scripts/setup.sh installs Mesa's EGL and moderngl)."""

import numpy as np
import pytest

from fxc.driver.build import build
from fxc.errors import CompileError, LoweringError
from fxc.ops.registry import all_ops
from fxc.relay_like.builder import Builder
from fxc.runtime.tensors import TensorSpec
from tests.helpers import assert_close_np
from tests.helpers_devices import (
    check_binary_ops,
    fixture_expected,
    fixture_kernel,
    fixture_launches,
    run_script,
    target_error_script,
)


# ------------------------------------------------------------------------------------------ the loop-IR fixture
def test_fixture_kernel_on_glsl():
    """The renderers' shared loop-IR fixture (parallel rows, private accumulator, select, casts, floor division,
    vector loads/stores) as GLSL compute shaders equals numpy."""
    from fxc.backends.glsl import render_glsl
    from fxc.runtime.opengl.module import GLModule
    x = np.random.default_rng(0).standard_normal((6, 32)).astype(np.float32)
    kernels, plan = fixture_launches(fixture_kernel(6, 32), index_bits=32)
    source = render_glsl(kernels)
    assert "#version 430" in source and "gl_WorkGroupID" in source
    m = GLModule("opengl", source, [TensorSpec("x", x.shape, "float32")], [TensorSpec("y", x.shape, "float32")],
                 [], 0, plan)
    assert_close_np(m(x), fixture_expected(x))


# ------------------------------------------------------------------------------------- math and edge cases


MATH = ("erf", "expm1", "log1p", "tanh", "sigmoid", "log10", "asinh", "atan", "exp", "sqrt")


@pytest.mark.parametrize("name", MATH)
def test_glsl_math_helpers_in_float32(name):
    """The functions GLSL lacks or computes loosely (fxc.backends.glsl helpers) against the op references."""
    x = np.concatenate([np.linspace(-6, 6, 997), [0.0, 1e-6, -1e-6, 1e-3, 20.0, -20.0]]).astype(np.float32)
    if name in ("log10", "sqrt", "log1p"):
        x = np.abs(x) + np.float32(0.01) if name != "log1p" else np.abs(x) - np.float32(0.5)
    b = Builder()
    v = b.graph.input(x.shape, "float32")
    b.graph.outputs = [b.call(name, [v])]
    got = build(b.graph, target="opengl")(x)
    ref = np.asarray(all_ops()[name].reference(x.astype(np.float64))).astype(np.float32)
    assert_close_np(got, ref, rtol=2e-5, atol=1e-6)


def test_pow_atan2_fmod_edge_cases():
    a = np.array([-2.0, -2.0, 0.0, 0.0, 2.0, -0.0, 3.0, -8.0, 5.3, -5.3], np.float32)
    e = np.array([3.0, 0.5, 0.0, -1.0, 10.0, 3.0, -2.0, 2.0, 0.7, 0.7], np.float32)
    check_binary_ops("opengl", ("pow", "atan2", "remainder", "fmod"), a, e)


# ------------------------------------------------------------------------------------------ int64 in 32 bits
def test_int64_arithmetic_that_may_overflow_32_bits_is_refused():
    """int64 arithmetic that may overflow 32 bits is refused (int64 indices narrowed and checked:
    tests/backends/test_every_target.py)."""
    b = Builder()
    x, y = b.graph.input((4,), "int64"), b.graph.input((4,), "int64")
    b.graph.outputs = [b.call("add", [x, y])]
    with pytest.raises(LoweringError, match="64-bit integer"):
        build(b.graph, target="opengl")


# ------------------------------------------------------------------------------------------------- errors
@pytest.mark.parametrize("env,says", [({"__EGL_VENDOR_LIBRARY_FILENAMES": "/nonexistent.json"}, "EGL"),
                                      ({"MESA_GL_VERSION_OVERRIDE": "3.3"}, "OpenGL 4.3")],
                         ids=["no-egl-driver", "gl-3.3"])
def test_no_gl_context_or_old_gl_is_a_target_error(env, says):
    p = run_script(target_error_script("opengl", says, "libegl-mesa0"), **env)
    assert p.returncode == 0, p.stdout + p.stderr


def test_a_driver_error_carries_source_and_log():
    from fxc.runtime.opengl.device import open_device
    bad = "#version 430\nlayout(local_size_x = 1) in;\nvoid main() { undefined_name = 1; }\n"
    with pytest.raises(CompileError) as e:
        open_device().program(bad)
    assert e.value.source == bad and "undefined_name" in e.value.log
