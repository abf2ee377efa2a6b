"""The ONNX frontend (fxc.from_onnx): a fixed sample of onnx's node test cases, every light model, the CLI,
fp16 and QDQ models against onnx's reference evaluator, named dims, shape inputs, export, and bad inputs (named fxc
errors)."""
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto as T, helper as h, numpy_helper

import fxc
from fxc.errors import FxcError, InputError, ModelFileError, ShapeError, UnsupportedOpError
from fxc.testing import onnx_conformance as conf

# one or more cases of every converter family; the whole suite is `python -m fxc.testing.onnx_conformance`
NODE_SAMPLE = [
    "test_abs", "test_add_bcast", "test_argmax_keepdims_example", "test_averagepool_2d_pads",
    "test_averagepool_2d_same_upper", "test_basic_conv_with_padding", "test_batchnorm_example", "test_mean_example",
    "test_clip_default_inbounds", "test_concat_3d_axis_negative_1", "test_constantofshape_int_zeros",
    "test_conv_with_strides_and_asymmetric_padding", "test_convtranspose_pads", "test_cumsum_1d_reverse_exclusive",
    "test_depthtospace_crd_mode_example", "test_div", "test_einsum_batch_diagonal", "test_elu_default", "test_equal",
    "test_expand_dim_changed", "test_flatten_negative_axis1", "test_gather_2d_indices",
    "test_gather_elements_negative_indices", "test_gathernd_example_int32_batch_dim1", "test_gemm_all_attributes",
    "test_globalaveragepool", "test_hardmax_axis_0",
    "test_instancenorm_example", "test_layer_normalization_4d_axis1", "test_leakyrelu", "test_logsoftmax_axis_0",
    "test_lrn", "test_matmul_4d", "test_maxpool_2d_pads", "test_maxpool_with_argmax_2d_precomputed_strides",
    "test_mod_mixed_sign_int64", "test_onehot_negative_indices", "test_constant_pad", "test_reflect_pad",
    "test_pow_bcast_array", "test_prelu_broadcast",
    "test_reduce_log_sum_exp_keepdims_random", "test_reduce_sum_negative_axes_keepdims_random",
    "test_reshape_negative_extended_dims", "test_scatter_elements_with_reduction_max", "test_scatternd",
    "test_selu", "test_slice_neg_steps", "test_softmax_axis_1_expanded", "test_split_variable_parts_2d_opset18",
    "test_squeeze_negative_axes", "test_tile", "test_top_k_negative_axis", "test_transpose_all_permutations_3",
    "test_tril_neg", "test_unsqueeze_two_axes", "test_where_long_example", "test_xor_bcast4v4d",
]

_CASES = {}


def _case(name):
    if not _CASES:
        _CASES.update({c[0]: c for c in conf.node_cases(all_dtypes=True)})
    return _CASES[name]


@pytest.mark.parametrize("name", NODE_SAMPLE)
def test_node_case(name):
    _, _, model, data_sets, rtol, atol = _case(name)
    status, msg, _ = conf.run_case(conf.FxcBackend(), model, data_sets, rtol, atol)
    if status == "unsupported" and name in KNOWN_UNSUPPORTED:
        pytest.xfail(msg)
    assert status == "pass", msg


KNOWN_UNSUPPORTED: set = set()


@pytest.mark.slow
@pytest.mark.parametrize("name", [p.stem for p in sorted(
    (Path(onnx.__file__).parent / "backend/test/data/light").glob("light_*.onnx"))])
def test_light_model(name):
    (_, path, inputs, expected), = [m for m in conf.light_models() if m[0] == name]
    status, msg, _ = conf.run_case(conf.FxcBackend(), onnx.load(str(path)), [(inputs, expected)], 1e-3, 1e-7)
    assert status == "pass", msg


# -- small models made here ----------------------------------------------------------------------------------
def _model(nodes, inputs, outputs, inits=(), opset=17):
    g = h.make_graph(nodes, "g", inputs, outputs, initializer=list(inits))
    m = h.make_model(g, opset_imports=[h.make_opsetid("", opset)])
    onnx.checker.check_model(m)
    return m


def _ref(model, *inputs):
    """onnx's own reference evaluator (the spec's numpy implementation)."""
    from onnx.reference import ReferenceEvaluator
    names = [i.name for i in model.graph.input if i.name not in {t.name for t in model.graph.initializer}]
    return ReferenceEvaluator(model).run(None, dict(zip(names, inputs)))


def _convnet(dtype=T.FLOAT, batch="N"):
    rng = np.random.default_rng(0)
    npdt = np.float16 if dtype == T.FLOAT16 else np.float32
    w = numpy_helper.from_array(rng.normal(0, 0.3, (4, 3, 3, 3)).astype(npdt), "w")
    b = numpy_helper.from_array(rng.normal(0, 0.1, (4,)).astype(npdt), "b")
    fc = numpy_helper.from_array(rng.normal(0, 0.3, (4, 5)).astype(npdt), "fc")
    nodes = [h.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]), h.make_node("Relu", ["c"], ["r"]),
             h.make_node("GlobalAveragePool", ["r"], ["p"]), h.make_node("Flatten", ["p"], ["f"]),
             h.make_node("MatMul", ["f", "fc"], ["y"])]
    return _model(nodes, [h.make_tensor_value_info("x", dtype, [batch, 3, 8, 8])],
                  [h.make_tensor_value_info("y", dtype, [batch, 5])], [w, b, fc])


def test_named_dims_bind_per_call():
    m = _convnet()
    f = fxc.from_onnx(m)
    for n in (1, 3):
        x = np.random.default_rng(n).normal(size=(n, 3, 8, 8)).astype(np.float32)
        np.testing.assert_allclose(f(x), _ref(m, x)[0], rtol=1e-4, atol=1e-5)
    with pytest.raises(InputError, match="dim 1 is 3"):
        f(np.zeros((1, 4, 8, 8), np.float32))


def test_shapes_and_torch_tensors_and_export(tmp_path):
    import torch
    m = _convnet()
    f = fxc.from_onnx(m, shapes={"x": (2, 3, 8, 8)})
    x = torch.randn(2, 3, 8, 8)
    y = f(x)
    assert isinstance(y, torch.Tensor)
    np.testing.assert_allclose(y.numpy(), _ref(m, x.numpy())[0], rtol=1e-4, atol=1e-5)
    path = fxc.export(f, tmp_path / "m.fxc")
    np.testing.assert_allclose(fxc.load(path)(x.numpy()), y.numpy(), rtol=0, atol=0)
    with pytest.raises(InputError, match="dim 2 is 8"):
        fxc.from_onnx(m, shapes={"x": (2, 3, 9, 8)})


def test_float16_model_matches_the_reference():
    m = _convnet(T.FLOAT16, batch=2)
    x = np.random.default_rng(1).normal(size=(2, 3, 8, 8)).astype(np.float16)
    y = fxc.from_onnx(m)(x)
    ref = _ref(m, x)[0]
    assert y.dtype == np.float16
    np.testing.assert_allclose(y.astype(np.float32), ref.astype(np.float32), rtol=1e-2, atol=1e-2)


def test_qdq_int8_model_matches_the_reference():
    rng = np.random.default_rng(2)
    wq = rng.integers(-127, 128, (4, 3, 3, 3)).astype(np.int8)
    inits = [numpy_helper.from_array(wq, "wq"), numpy_helper.from_array(np.array(0.01, np.float32), "ws"),
             numpy_helper.from_array(np.array(0, np.int8), "wz"),
             numpy_helper.from_array(np.array(0.02, np.float32), "xs"),
             numpy_helper.from_array(np.array(3, np.uint8), "xz")]
    nodes = [h.make_node("QuantizeLinear", ["x", "xs", "xz"], ["xq"]),
             h.make_node("DequantizeLinear", ["xq", "xs", "xz"], ["xd"]),
             h.make_node("DequantizeLinear", ["wq", "ws", "wz"], ["wd"]),
             h.make_node("Conv", ["xd", "wd"], ["y"], pads=[1, 1, 1, 1])]
    m = _model(nodes, [h.make_tensor_value_info("x", T.FLOAT, [1, 3, 8, 8])],
               [h.make_tensor_value_info("y", T.FLOAT, [1, 4, 8, 8])], inits, opset=21)
    x = rng.uniform(-0.05, 4, (1, 3, 8, 8)).astype(np.float32)
    np.testing.assert_allclose(fxc.from_onnx(m)(x), _ref(m, x)[0], rtol=1e-4, atol=1e-4)


def test_external_data(tmp_path):
    m = _convnet(batch=1)
    x = np.ones((1, 3, 8, 8), np.float32)
    ref = _ref(m, x)[0]
    path = tmp_path / "m.onnx"
    onnx.save_model(m, str(path), save_as_external_data=True, all_tensors_to_one_file=True, location="m.data",
                    size_threshold=0)
    assert (tmp_path / "m.data").exists()
    np.testing.assert_allclose(fxc.from_onnx(path)(x), ref, rtol=1e-4, atol=1e-5)
    (tmp_path / "m.data").unlink()
    with pytest.raises(ModelFileError, match="external data"):
        fxc.from_onnx(path)


def test_shape_input_specialises_and_guards():
    m = _model([h.make_node("Reshape", ["x", "s"], ["y"])],
               [h.make_tensor_value_info("x", T.FLOAT, [2, 6]), h.make_tensor_value_info("s", T.INT64, [2])],
               [h.make_tensor_value_info("y", T.FLOAT, ["a", "b"])])
    f = fxc.from_onnx(m)
    x = np.arange(12, dtype=np.float32).reshape(2, 6)
    assert f(x, np.array([3, 4])).shape == (3, 4)
    assert f(x, np.array([4, 3])).shape == (4, 3)      # another value compiles again, never reuses (3, 4)
    np.testing.assert_array_equal(f(x, np.array([-1, 2])), x.reshape(-1, 2))


def test_cli_compiles_onnx(tmp_path):
    m = _convnet(batch=1)
    onnx.save(m, str(tmp_path / "m.onnx"))
    from fxc.cli import main
    assert main(["compile", str(tmp_path / "m.onnx"), "-o", str(tmp_path / "m.fxc")]) == 0
    x = np.random.default_rng(3).normal(size=(1, 3, 8, 8)).astype(np.float32)
    np.testing.assert_allclose(fxc.load(tmp_path / "m.fxc")(x), _ref(m, x)[0], rtol=1e-4, atol=1e-5)
    onnx.save(_convnet(), str(tmp_path / "n.onnx"))             # a named batch dim: --input-shape binds it
    assert main(["compile", str(tmp_path / "n.onnx"), "--input-shape", "2,3,8,8", "-o", str(tmp_path / "n.fxc")]) == 0
    assert fxc.load(tmp_path / "n.fxc")(np.zeros((2, 3, 8, 8), np.float32)).shape == (2, 5)


# -- bad input ---------------------------------------------------------------------------------------------------
def test_named_dim_must_agree_across_inputs():
    m = _model([h.make_node("Add", ["a", "b"], ["y"])],
               [h.make_tensor_value_info("a", T.FLOAT, ["N", 3]), h.make_tensor_value_info("b", T.FLOAT, ["N", 3])],
               [h.make_tensor_value_info("y", T.FLOAT, ["N", 3])])
    f = fxc.from_onnx(m)
    np.testing.assert_array_equal(f(np.ones((2, 3), np.float32), np.ones((2, 3), np.float32)), np.full((2, 3), 2.0))
    with pytest.raises(InputError, match="dim 'N' is 2 in input 'a'"):
        f(np.ones((2, 3), np.float32), np.ones((1, 3), np.float32))


def test_truncated_and_corrupt_files(tmp_path):
    data = _convnet().SerializeToString()
    (tmp_path / "t.onnx").write_bytes(data[: len(data) // 2])
    with pytest.raises(ModelFileError, match="t.onnx"):
        fxc.from_onnx(tmp_path / "t.onnx")
    (tmp_path / "c.onnx").write_bytes(b"\xff\x00garbage" * 50)
    with pytest.raises(ModelFileError):
        fxc.from_onnx(tmp_path / "c.onnx")
    with pytest.raises(ModelFileError, match="no ONNX file"):
        fxc.from_onnx(tmp_path / "missing.onnx")
    with pytest.raises(ModelFileError):
        fxc.from_onnx(data[:-7])


def test_invalid_graph_and_wrong_inputs():
    bad = _convnet()
    bad.graph.node[1].input[0] = "nowhere"
    with pytest.raises(ModelFileError):
        fxc.from_onnx(bad)
    f = fxc.from_onnx(_convnet(), shapes=[(1, 3, 8, 8)])
    with pytest.raises(InputError):
        f(np.zeros((1, 3, 8), np.float32))
    with pytest.raises(InputError, match="1 inputs"):
        f(np.zeros((1, 3, 8, 8), np.float32), np.zeros(1))
    with pytest.raises(InputError, match="not inputs"):
        fxc.from_onnx(_convnet(), shapes={"y": (1, 3, 8, 8)})


def test_unsupported_ops_listed_together():
    nodes = [h.make_node("Unique", ["x"], ["u"], name="uniq"), h.make_node("Relu", ["u"], ["r"]),
             h.make_node("Bernoulli", ["r"], ["y"], name="coin")]
    m = _model(nodes, [h.make_tensor_value_info("x", T.FLOAT, [3, 3])],
               [h.make_tensor_value_info("y", T.FLOAT, [3, 3])])
    with pytest.raises(UnsupportedOpError,
                       match=r"2 node\(s\)[\s\S]*Unique \(node 'uniq'\)[\s\S]*Bernoulli \(node 'coin'\)"):
        fxc.from_onnx(m)


def test_stated_promotion_policy():
    from fxc.relay_like.builder import Builder, stated_promotion, torch_promotion
    b = Builder()
    assert b.promotion is torch_promotion
    x, i = b.graph.input((2,), "float32"), b.graph.input((2,), "int64")
    assert b.result_type([x, i]) == "float32" and b.result_type([i, 2.5]) == "float32"   # PyTorch's rules
    s = Builder(promotion=stated_promotion)
    assert s.result_type([i, 2.5]) == "int64"          # a scalar takes the tensor's stated type
    with pytest.raises(ShapeError, match="cast them"):
        s.call("add", [x, i])


def test_conformance_command_writes_report(tmp_path):
    out = tmp_path / "r.json"
    p = subprocess.run([sys.executable, "-m", "fxc.testing.onnx_conformance", "--no-models", "--filter",
                        "^test_(relu|unique_not_sorted_without_axis)$", "--all-dtypes", "--json", str(out)],
                       capture_output=True, text=True, timeout=300, check=False)
    assert p.returncode == 0, p.stderr
    import json
    r = json.loads(out.read_text())
    assert r["totals"]["node"] == {"cases": 2, "pass": 1, "fail": 0, "unsupported": 1, "pass_rate": 0.5}
    assert r["ops"]["Relu"]["pass"] == 1 and r["ops"]["Unique"]["unsupported"] == 1


def test_from_onnx_rejects_unknown_options():
    with pytest.raises(FxcError, match="unknown fxc option"):
        fxc.from_onnx(_convnet(), bogus=1)
