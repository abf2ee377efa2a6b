"""Hostile and careless ONNX models (issue 41, items 3, 4 and 17), each built here: external data of a model given
as bytes or a ModelProto (never read from the working directory), out-of-range axes of every converter (onnx's
reference evaluator raises; fxc names the node), damaged tensors and attributes (fxc.errors naming the node or
tensor), negative dims and an opset newer than fxc knows."""
import os
import warnings

import numpy as np
import onnx
import pytest
from onnx import TensorProto as T, helper as h, numpy_helper
from onnx.reference import ReferenceEvaluator

import fxc
from fxc.capture.onnx.table import NEWEST_OPSET, table
from fxc.errors import FxcError, IndexOutOfRangeError, InputError, ModelFileError, ShapeError


def model(nodes, inputs, outputs, inits=(), opset=18):
    g = h.make_graph(nodes, "g", inputs, outputs, list(inits))
    return h.make_model(g, opset_imports=[h.make_opsetid("", opset)], ir_version=9)


def vi(name, shape, elem=T.FLOAT):
    return h.make_tensor_value_info(name, elem, shape)


# -- item 3: external data of a model with no folder -------------------------------------------------------------
def external_model(tmp_path):
    """y = x + w, w (4 floats) saved as external data in tmp_path/w.bin; returns (model path, w)."""
    w = np.arange(4, dtype=np.float32) + 1
    m = model([h.make_node("Add", ["x", "w"], ["y"])], [vi("x", [4])], [vi("y", [4])],
              [numpy_helper.from_array(w, "w")])
    path = tmp_path / "m.onnx"
    onnx.save_model(m, str(path), save_as_external_data=True, location="w.bin", size_threshold=0)
    return path, w


@pytest.fixture
def in_folder(tmp_path, monkeypatch):
    """The working directory: a folder of the user's own files, one named like the model's data."""
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    (cwd / "notes.txt").write_bytes(b"my secret notes!")        # 16 bytes: four float32s
    monkeypatch.chdir(cwd)
    return cwd


def test_external_data_from_bytes_is_refused_not_read_from_cwd(tmp_path, in_folder):
    path, w = external_model(tmp_path / "")
    proto = onnx.load(str(path), load_external_data=False)
    proto.graph.initializer[0].external_data[0].value = "notes.txt"         # names a file of the CWD
    x = np.zeros(4, np.float32)
    for given in (proto.SerializeToString(), proto):
        with pytest.raises(ModelFileError, match=r"'w' in 'notes.txt'.*no folder.*base_dir="):
            fxc.from_onnx(given)
    proto.graph.initializer[0].external_data[0].value = "w.bin"
    for given in (proto.SerializeToString(), proto):
        np.testing.assert_array_equal(fxc.from_onnx(given, base_dir=tmp_path)(x), w)     # base_dir: read there
    assert proto.graph.initializer[0].data_location == T.EXTERNAL           # the caller's ModelProto untouched
    np.testing.assert_array_equal(fxc.from_onnx(path)(x), w)                # a path: its folder
    with pytest.raises(InputError, match="base_dir"):
        fxc.from_onnx(path, base_dir=tmp_path)
    with pytest.raises(ModelFileError, match="not a folder"):
        fxc.from_onnx(proto, base_dir=tmp_path / "nowhere")


@pytest.mark.parametrize("location", ["../cwd/notes.txt", "/etc/hostname", "missing.bin"])
def test_external_data_base_dir_keeps_onnx_checks(tmp_path, in_folder, location):
    path, _ = external_model(tmp_path)
    proto = onnx.load(str(path), load_external_data=False)
    proto.graph.initializer[0].external_data[0].value = location
    with pytest.raises(ModelFileError, match="external data cannot be read"):
        fxc.from_onnx(proto, base_dir=tmp_path)


def test_external_data_past_the_end_from_bytes(tmp_path):
    path, _ = external_model(tmp_path)
    proto = onnx.load(str(path), load_external_data=False)
    entries = proto.graph.initializer[0].external_data
    entries.add(key="offset", value="64")                                   # the file has 16 bytes
    with pytest.raises(ModelFileError, match="external data cannot be read.*exceeds"):
        fxc.from_onnx(proto.SerializeToString(), base_dir=tmp_path)
    entries[-1].value = "0"
    entries.add(key="length", value="4000")
    with pytest.raises(ModelFileError, match="external data cannot be read.*exceeds"):
        fxc.from_onnx(proto.SerializeToString(), base_dir=tmp_path)


# -- item 4: every converter's axis checked ------------------------------------------------------------------------
X = np.arange(6, dtype=np.float32).reshape(2, 3) / 6
I64 = T.INT64


def axes_input(values):
    return numpy_helper.from_array(np.array(values, np.int64), "axes")


# (node, output shape, extra initializers) with an axis out of range (or named twice) for the rank-2 input x
BAD_AXES = {
    "softmax-2": (h.make_node("Softmax", ["x"], ["y"], axis=2), [2, 3], []),
    "softmax--3": (h.make_node("Softmax", ["x"], ["y"], axis=-3), [2, 3], []),
    "logsoftmax-2": (h.make_node("LogSoftmax", ["x"], ["y"], axis=2), [2, 3], []),
    "hardmax-5": (h.make_node("Hardmax", ["x"], ["y"], axis=5), [2, 3], []),
    "squeeze-2": (h.make_node("Squeeze", ["x", "axes"], ["y"]), [2, 3], [axes_input([2])]),
    "unsqueeze-3": (h.make_node("Unsqueeze", ["x", "axes"], ["y"]), [2, 3, 1], [axes_input([3])]),
    "unsqueeze-twice": (h.make_node("Unsqueeze", ["x", "axes"], ["y"]), [1, 1, 2, 3], [axes_input([0, 0])]),
    "argmax-2": (h.make_node("ArgMax", ["x"], ["y"], axis=2), [2, 3], []),
    "concat-2": (h.make_node("Concat", ["x", "x"], ["y"], axis=2), [2, 3], []),
    "reducesum-2": (h.make_node("ReduceSum", ["x", "axes"], ["y"]), [2, 3], [axes_input([2])]),
    "reducemax-twice": (h.make_node("ReduceMax", ["x", "axes"], ["y"], keepdims=0), [2], [axes_input([1, -1])]),
    "gather-2": (h.make_node("Gather", ["x", "axes"], ["y"], axis=2), [2, 3], [axes_input([0])]),
    "split-2": (h.make_node("Split", ["x"], ["y"], axis=2, num_outputs=1), [2, 3], []),
    "cumsum-2": (h.make_node("CumSum", ["x", "axes"], ["y"]), [2, 3],
                 [numpy_helper.from_array(np.array(2, np.int64), "axes")]),
    "transpose-perm": (h.make_node("Transpose", ["x"], ["y"], perm=[0, 2]), [2, 3], []),
    "flip-slice-axis": (h.make_node("Slice", ["x", "st", "en", "axes"], ["y"]), [2, 3],
                        [numpy_helper.from_array(np.array([0], np.int64), "st"),
                         numpy_helper.from_array(np.array([1], np.int64), "en"), axes_input([-3])]),
}


@pytest.mark.parametrize("case", sorted(BAD_AXES))
def test_axis_out_of_range_names_the_node(case):
    node, out_shape, inits = BAD_AXES[case]
    node.name = f"the_{case}"
    out_type = I64 if node.op_type == "ArgMax" else T.FLOAT
    m = model([node], [vi("x", [2, 3])], [vi("y", None if not out_shape else out_shape, out_type)], inits)
    with pytest.raises(Exception):                      # noqa: B017  (onnx's reference evaluator refuses it too)
        ReferenceEvaluator(m).run(None, {"x": X})
    with pytest.raises(ShapeError, match=f"{node.op_type} \\(node 'the_{case}'\\).*(out of range|twice|perm)"):
        fxc.from_onnx(m)


def test_axis_out_of_the_spec_range_the_reference_takes():
    """LayerNormalization's axis is in [-r, r) by the spec; onnx's reference evaluator computes something for
    axis=r all the same: fxc keeps to the spec."""
    node = h.make_node("LayerNormalization", ["x", "s"], ["y"], axis=2, name="ln")
    m = model([node], [vi("x", [2, 3])], [vi("y", [2, 3])], [numpy_helper.from_array(np.ones(3, np.float32), "s")])
    with pytest.raises(ShapeError, match=r"LayerNormalization \(node 'ln'\): axis 2 is out of range"):
        fxc.from_onnx(m)


@pytest.mark.parametrize("axis", [-3, -2, -1, 0, 1, 2, 3])
def test_flatten_axis_range(axis):
    """Flatten's axis is in [-r, r] by the spec (r: the rank; axis r puts every dim before the split); onnx's
    reference evaluator computes something outside it too: fxc keeps to the spec."""
    m = model([h.make_node("Flatten", ["x"], ["y"], axis=axis, name="fl")], [vi("x", [2, 3])], [vi("y", ["a", "b"])])
    if -2 <= axis <= 2:
        np.testing.assert_array_equal(fxc.from_onnx(m)(X), ReferenceEvaluator(m).run(None, {"x": X})[0])
    else:
        with pytest.raises(ShapeError, match=rf"Flatten \(node 'fl'\): axis {axis} is out of range"):
            fxc.from_onnx(m)


@pytest.mark.parametrize("axis", [-2, -1, 0, 1])
def test_axes_in_range_match_the_reference(axis):
    """The edges of the range are taken, negative ones counted from the end."""
    for node, out in [(h.make_node("Softmax", ["x"], ["y"], axis=axis), [2, 3]),
                      (h.make_node("Unsqueeze", ["x", "axes"], ["y"]), ["a", "b", "c"]),
                      (h.make_node("ReduceSum", ["x", "axes"], ["y"], keepdims=0), ["a"])]:
        m = model([node], [vi("x", [2, 3])], [vi("y", out)], [axes_input([axis])])
        np.testing.assert_allclose(fxc.from_onnx(m)(X), ReferenceEvaluator(m).run(None, {"x": X})[0], rtol=1e-6)


# -- item 17: damages named -----------------------------------------------------------------------------------------
def test_negative_input_dim_refused_at_from_onnx():
    m = model([h.make_node("Relu", ["x"], ["y"])], [vi("x", [2, -3])], [vi("y", [2, -3])])
    with pytest.raises(ModelFileError, match="input 'x'.*negative dim"):
        fxc.from_onnx(m)
    ok = model([h.make_node("Relu", ["x"], ["y"])], [vi("x", ["n", 3])], [vi("y", ["n", 3])])
    with pytest.raises(InputError, match="negative dim"):
        fxc.from_onnx(ok, shapes={"x": (-2, 3)})


def test_gather_of_constants_out_of_range():
    data = numpy_helper.from_array(np.arange(5, dtype=np.float32), "d")
    idx = numpy_helper.from_array(np.array([1, 7], np.int64), "i")
    m = model([h.make_node("Gather", ["d", "i"], ["g"], name="pick"), h.make_node("Add", ["g", "x"], ["y"])],
              [vi("x", [2])], [vi("y", [2])], [data, idx])
    with pytest.raises(IndexError):
        ReferenceEvaluator(m).run(None, {"x": np.zeros(2, np.float32)})
    with pytest.raises(IndexOutOfRangeError, match=r"Gather \(node 'pick'\): index 7 .* size 5"):
        fxc.from_onnx(m)


def test_initializer_whose_values_contradict_its_dims():
    w = numpy_helper.from_array(np.ones(20, np.float32), "w")
    w.dims[:] = [4, 4]
    m = model([h.make_node("Add", ["x", "w"], ["y"])], [vi("x", [4, 4])], [vi("y", [4, 4])], [w])
    with pytest.raises(ModelFileError, match="tensor 'w'.*dims"):                   # too many values
        fxc.from_onnx(m)
    m.graph.initializer[0].raw_data = np.ones(6, np.float32).tobytes()
    with pytest.raises(ModelFileError, match="tensor name: w"):                     # too few: onnx's checker
        fxc.from_onnx(m)


def test_elem_type_undefined():
    m = model([h.make_node("Relu", ["x"], ["y"])], [vi("x", [2], T.UNDEFINED)], [vi("y", [2])])
    with pytest.raises(ModelFileError, match="input 'x': elem_type 0"):
        fxc.from_onnx(m)
    m = model([h.make_node("Relu", ["x"], ["y"])], [vi("x", [2], 77)], [vi("y", [2])])
    with pytest.raises(FxcError, match="input 'x'"):
        fxc.from_onnx(m)


def test_range_with_delta_zero():
    c = [numpy_helper.from_array(np.array(v, np.float32), n) for v, n in ((0, "s"), (5, "l"), (0, "d"))]
    m = model([h.make_node("Range", ["s", "l", "d"], ["r"], name="steps"), h.make_node("Add", ["r", "x"], ["y"])],
              [vi("x", [1])], [vi("y", ["n"])], c)
    with pytest.raises(ShapeError, match=r"Range \(node 'steps'\).*delta"):
        fxc.from_onnx(m)


def test_constant_of_shape_negative():
    shape = numpy_helper.from_array(np.array([-3], np.int64), "shape")
    m = model([h.make_node("ConstantOfShape", ["shape"], ["c"], name="fill"), h.make_node("Add", ["c", "x"], ["y"])],
              [vi("x", [1])], [vi("y", ["n"])], [shape])
    with pytest.raises(ShapeError, match=r"ConstantOfShape \(node 'fill'\).*negative"):
        fxc.from_onnx(m)


def test_opset_newer_than_known_warns_once():
    assert NEWEST_OPSET >= max(s for entries in table().values() for s, _ in entries)
    m = model([h.make_node("Relu", ["x"], ["y"])], [vi("x", [2])], [vi("y", [2])], opset=NEWEST_OPSET + 1)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        f = fxc.from_onnx(m)
        f(np.array([-1.0, 2.0], np.float32))
        f(np.array([-1.0, 2.0], np.float32))
    said = [w for w in caught if "newer than fxc knows" in str(w.message)]
    assert len(said) == 1 and f"opset {NEWEST_OPSET + 1}" in str(said[0].message)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        fxc.from_onnx(model([h.make_node("Relu", ["x"], ["y"])], [vi("x", [2])], [vi("y", [2])],
                            opset=NEWEST_OPSET))


def test_working_directory_untouched(in_folder):
    assert sorted(os.listdir(in_folder)) == ["notes.txt"]


# -- what the fuzz found (tests/hardening/onnx_fuzz.py) ------------------------------------------------------------
def conv_model(**attrs):
    k = numpy_helper.from_array(np.ones((1, 1, 3, 3), np.float32), "k")
    node = h.make_node("Conv", ["x", "k"], ["y"], name="c", **attrs)
    return model([node], [vi("x", [1, 1, 5, 5])], [vi("y", [1, 1, 5, 5])], [k])


@pytest.mark.parametrize("attrs, says", [
    ({"pads": [1, 1, 1, 1], "strides": [1, 1, 1]}, "strides .1, 1, 1. must be 2 values"),
    ({"pads": [1, 1, 1, 1], "kernel_shape": [3, 7]}, "kernel_shape .3, 7. differs from the weight's"),
    ({"pads": [1, 1, -1, 1]}, "pads .* at least 0"),
    ({"pads": [1, 1, 1, 1], "dilations": [0, 1]}, "dilations .* at least 1"),
    ({"pads": [1, 1, 1, 1], "auto_pad": "MAYBE"}, "auto_pad 'MAYBE'"),
])
def test_conv_window_and_attributes_checked(attrs, says):
    with pytest.raises(ShapeError, match=r"Conv \(node 'c'\): " + says):
        fxc.from_onnx(conv_model(**attrs))
    ok = conv_model(pads=[1, 1, 1, 1])
    x = np.random.default_rng(0).normal(size=(1, 1, 5, 5)).astype(np.float32)
    np.testing.assert_allclose(fxc.from_onnx(ok)(x), ReferenceEvaluator(ok).run(None, {"x": x})[0], rtol=1e-5,
                               atol=1e-5)


def test_attribute_names_checked_against_the_schema():
    """onnx's checker leaves a function op's attribute names (LayerNormalization at opset 18) unchecked: a renamed
    one would be read as absent, its default taken."""
    says = "attribute 'epsilonn' is none of LayerNormalization's .axis, epsilon, stash_type."
    node = h.make_node("LayerNormalization", ["x", "s"], ["y"], name="ln", epsilonn=1e-3)
    m = model([node], [vi("x", [2, 3])], [vi("y", [2, 3])], [numpy_helper.from_array(np.ones(3, np.float32), "s")])
    onnx.checker.check_model(m)
    with pytest.raises(ModelFileError, match=r"LayerNormalization \(node 'ln'\): " + says):
        fxc.from_onnx(m)


def test_flag_attribute_other_than_0_or_1():
    m = model([h.make_node("ReduceSum", ["x", "axes"], ["y"], keepdims=2 ** 31, name="r")], [vi("x", [2, 3])],
              [vi("y", [2, 1])], [axes_input([1])])
    with pytest.raises(ModelFileError, match=r"ReduceSum \(node 'r'\): attribute keepdims is 2147483648; .* 0 or 1"):
        fxc.from_onnx(m)


def test_type_rule_error_names_the_node():
    a = numpy_helper.from_array(np.ones((3, 2), np.float32), "a")
    m = model([h.make_node("Add", ["x", "a"], ["y"], name="plus")], [vi("x", [2, 3])], [vi("y", [2, 3])], [a])
    with pytest.raises(ShapeError, match=r"Add \(node 'plus'\): .*broadcast"):
        fxc.from_onnx(m)


def test_a_huge_result_of_constants_is_not_folded():
    """Expand of a one-element constant to 2**23 elements stays an op of the graph (computed at run time); a
    dequantised weight (as large as its input) stays a dequantize of its int8 constant, for the integer kernels
    (relay_like/passes/quantize.py; fold_constants folds it where they do not take it)."""
    from fxc.capture.onnx import to_graph
    one = numpy_helper.from_array(np.ones(1, np.float32), "one")
    shape = numpy_helper.from_array(np.array([2 ** 23], np.int64), "shape")
    m = model([h.make_node("Expand", ["one", "shape"], ["e"]), h.make_node("Add", ["e", "x"], ["y"])],
              [vi("x", [1])], [vi("y", [2 ** 23])], [one, shape])
    g = to_graph(m, [(1,)])
    assert "expand" in [n.op for n in g.nodes]
    w = numpy_helper.from_array(np.ones(2 ** 23, np.int8), "w")
    s = numpy_helper.from_array(np.array(0.5, np.float32), "s")
    q = model([h.make_node("DequantizeLinear", ["w", "s"], ["d"]), h.make_node("Add", ["d", "x"], ["y"])],
              [vi("x", [1])], [vi("y", [2 ** 23])], [w, s])
    g = to_graph(q, [(1,)])
    assert [n.op for n in g.nodes] == ["dequantize", "add"] and g.nodes[0].inputs[0].dtype == "int8"
