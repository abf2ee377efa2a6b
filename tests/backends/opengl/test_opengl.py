"""The OpenGL target (Mesa llvmpipe through EGL here): the loop-IR fixture on the GLSL renderer, the OpenCL test's
fixed op sample, GLSL's float32 math helpers against numpy, int64 in 32 bits (proved, checked or refused),
torch.compile / from_torch / export + load without torch, and the error cases.

A missing GL runtime is a failure, not a skip (scripts/setup.sh installs Mesa's EGL and moderngl)."""
import json

import numpy as np
import pytest
import torch

import fxc
import fxc.capture.torch.recorder
from fxc.driver.build import build
from fxc.errors import CompileError, LoweringError, TargetError
from fxc.ops.registry import all_ops
from fxc.relay_like.builder import Builder
from fxc.runtime.tensors import TensorSpec
from tests.helpers import assert_close_np, check_module
from tests.helpers_devices import (
    CASE_IDS,
    CASES,
    check_binary_ops,
    check_folded_grid,
    check_int64_embedding,
    check_int_division_by_zero,
    check_op_sample,
    check_reference_model,
    check_row_sum,
    export_and_load_without_torch,
    fixture_expected,
    fixture_kernel,
    fixture_launches,
    run_script,
    small_net,
    target_error_script,
)

# ops of the sample that GL refuses (a LoweringError: torch.compile runs their graph in eager): float64 (cholesky's
# samples, and lgamma, which computes in float64 for float32 too, as every special function) and 64-bit hash
# constants (random_uniform)
REFUSED = {case: (LoweringError, None) for case in (("cholesky", 0), ("cholesky", 1), ("lgamma", 0), ("lgamma", 1),
                                                    ("random_uniform", 0), ("random_uniform", 1))}


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


def test_tree_reduction_uses_shared_memory_and_barriers():
    m = check_row_sum("opengl")
    assert "shared float" in m.source and "barrier();" in m.source


def test_grid_longer_than_gl_dispatch_limit_is_folded():
    """More than 65535 work-groups on one axis: split over two dispatch axes, recombined in the shader."""
    check_folded_grid("opengl")


# ---------------------------------------------------------------------------------------------- the op sample
@pytest.mark.parametrize("name,k", CASES, ids=CASE_IDS)
def test_op_sample_on_opengl(name, k):
    module = check_op_sample("opengl", name, k, refused=REFUSED)
    assert module is None or module.plan


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
def test_int64_indices_narrowed_and_checked():
    """int64 indices (an embedding) run in 32 bits; an int64 value beyond 32 bits is an ExecutionError, never a
    wrong row; int64 arithmetic that may overflow 32 bits is refused."""
    check_int64_embedding("opengl")
    b = Builder()
    x, y = b.graph.input((4,), "int64"), b.graph.input((4,), "int64")
    b.graph.outputs = [b.call("add", [x, y])]
    with pytest.raises(LoweringError, match="64-bit integer"):
        build(b.graph, target="opengl")


def test_int_division_by_zero_raises():
    check_int_division_by_zero("opengl")


# ---------------------------------------------------------------------------------------- users: torch, export
def test_torch_compile_keeps_weights_in_the_arena():
    model, x = small_net(), torch.randn(2, 3, 12, 12)
    compiled = torch.compile(model, backend="fxc", options={"target": "opengl"})
    fxc.capture.torch.recorder._recorders.append(rec := fxc.capture.torch.recorder.Explanation())
    try:
        with torch.no_grad():
            torch.testing.assert_close(compiled(x), model(x), rtol=1e-4, atol=1e-5)
    finally:
        fxc.capture.torch.recorder._recorders.remove(rec)
    assert rec.kernels and all("opengl" in k for k in rec.kernels), rec.kernels
    import gc
    m = [o for o in gc.get_objects() if type(o).__name__ == "GLModule" and o.prepack_inputs][-1]
    with torch.no_grad():
        compiled(x)
        assert m.uploaded_bytes == x.numel() * 4
        model[5].weight.mul_(2)
        torch.testing.assert_close(compiled(x), model(x), rtol=1e-4, atol=1e-5)
        assert m.uploaded_bytes > x.numel() * 4


def test_from_torch_export_and_load_without_torch(tmp_path):
    """from_torch(target="opengl") -> export -> load in a process that cannot import torch or llvmlite."""
    with export_and_load_without_torch("opengl", tmp_path) as z:
        assert "#version 430" in z.read("program.glsl").decode()
        assert json.loads(z.read("manifest.json"))["target"] == "opengl"


def test_model_on_opengl_matches_eager():
    check_module(small_net(), torch.randn(2, 3, 16, 16), target="opengl", rtol=1e-4, atol=1e-5)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["resnet18", "mobilenet_v2", "bert"])
def test_reference_models_on_opengl(name):
    check_reference_model("opengl", name)


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


def test_opengl_target_takes_no_options():
    b = Builder()
    v = b.graph.input((4,), "float32")
    b.graph.outputs = [b.call("exp", [v])]
    with pytest.raises(TargetError, match="takes none"):
        build(b.graph, target="opengl -device=1")
