"""Hostile and careless MXNet symbol JSON (issue 41, items 2, 8 and 18): attributes under the legacy "attr" key
read as MXNet 1.9 reads them (checked against MXNet's own attr_dict() and its results), input references to
outputs a node does not have refused before MXNet sees them (MXNet crashes on them), and input dims MXNet cannot
hold refused before its bare Exception."""
import json

import numpy as np
import pytest

import fxc
from fxc.capture.mxnet.convert import check_outputs_read, node_attrs, parse_symbol_json
from fxc.errors import ModelFileError, ShapeError
from fxc.testing.mxnet_zoo import import_mxnet

mx = import_mxnet()
X = np.array([[-2.0, -0.5, 0.25, 3.0], [1.5, -1.0, 0.0, 2.0]], np.float32)

# (op, attributes) whose defaults differ from these values: read without them, each gives another result
CASES = [
    ("_plus_scalar", {"scalar": "3"}),
    ("_mul_scalar", {"scalar": "2.5"}),
    ("clip", {"a_min": "-1", "a_max": "1"}),
    ("softmax", {"axis": "0"}),
    ("LeakyReLU", {"act_type": "leaky", "slope": "0.3"}),
    ("sum", {"axis": "1", "keepdims": "True"}),
]


def one_op(op: str, tables: list, version: bool = False) -> str:
    """A symbol JSON of x -> op, the op node's attribute tables given as (key, table) in this order; without an
    mxnet_version, as MXNet < 1.0 wrote it."""
    body = ", ".join(f'"{key}": {json.dumps(table)}' for key, table in tables)
    node = f'{{"op": "{op}", "name": "y", "inputs": [[0, 0, 0]]{", " if body else ""}{body}}}'
    attrs = ', "attrs": {"mxnet_version": ["int", 10901]}' if version else ""
    return (f'{{"nodes": [{{"op": "null", "name": "x", "inputs": []}}, {node}], "arg_nodes": [0], '
            f'"heads": [[1, 0, 0]]{attrs}}}')


def fxc_attrs(text: str) -> dict:
    return node_attrs(parse_symbol_json(text)["nodes"][1])


def mxnet_attrs(text: str) -> dict:
    """MXNet's own reading of node y's attributes (less the hidden __key__ copies its v0.8 upgrade adds)."""
    got = mx.sym.load_json(text).attr_dict().get("y", {})
    return {k: v for k, v in got.items() if not k.startswith("__")}


def mxnet_run(text: str) -> np.ndarray:
    return mx.sym.load_json(text).bind(mx.cpu(), {"x": mx.nd.array(X)}).forward()[0].asnumpy()


def fxc_run(text: str) -> np.ndarray:
    return fxc.from_mxnet(text, {}, shapes={"x": X.shape})(X)


@pytest.mark.parametrize("op, attrs", CASES, ids=[c[0] for c in CASES])
def test_legacy_attr_key_read_as_mxnet_does(op, attrs):
    text = one_op(op, [("attr", attrs)])
    assert fxc_attrs(text) == mxnet_attrs(text) == attrs
    want = mxnet_run(text)
    defaults = X if op == "clip" else mxnet_run(one_op(op, []))     # (clip's bounds are required: none, X itself)
    assert want.shape != defaults.shape or not np.allclose(want, defaults)     # the attributes matter here
    np.testing.assert_allclose(fxc_run(text), want, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("tables", [
    [("attrs", {"scalar": "1"}), ("attr", {"scalar": "3"})],
    [("attr", {"scalar": "3"}), ("attrs", {"scalar": "1"})],
    [("param", {"scalar": "5"}), ("attr", {"scalar": "3"})],
    [("attr", {"scalar": "3"}), ("param", {"scalar": "5", "is_int": "0"})],
    [("param", {"scalar": "5"})],
    [("attrs", {"scalar": "1"}), ("attr", {"scalar": "3"}), ("attrs", {"scalar": "7"})],  # a key given twice
], ids=["attrs-attr", "attr-attrs", "param-attr", "attr-param", "param", "attrs-attr-attrs"])
def test_attribute_tables_together_as_mxnet(tables):
    for version in (False, True):
        text = one_op("_plus_scalar", tables, version)
        assert fxc_attrs(text) == mxnet_attrs(text)
        np.testing.assert_allclose(fxc_run(text), mxnet_run(text), rtol=1e-6)


def test_attribute_table_not_of_strings_refused():
    with pytest.raises(ModelFileError, match="'y'.*not a table of strings"):
        fxc.from_mxnet(one_op("_plus_scalar", [("attr", {"scalar": 3})]), {}, shapes={"x": X.shape})


def graph_reading(inputs: list, heads=((2, 0, 0),)) -> str:
    """x -> relu r; a = elemwise_add(inputs), the output `heads`."""
    return json.dumps({"nodes": [{"op": "null", "name": "x", "inputs": []},
                                 {"op": "relu", "name": "r", "inputs": [[0, 0, 0]]},
                                 {"op": "elemwise_add", "name": "a", "inputs": inputs}],
                       "arg_nodes": [0], "heads": [list(h) for h in heads]})


@pytest.mark.parametrize("inputs, heads, match", [
    ([[0, 5, 0], [1, 0, 0]], [[2, 0, 0]], "'a'.*reads output 5 of node 'x' .null., which has 1 output"),
    ([[0, -1, 0], [1, 0, 0]], [[2, 0, 0]], r"'a'.*reads input \[0, -1, 0\]"),
    ([[1, 5, 0], [0, 0, 0]], [[2, 0, 0]], "'a'.*reads output 5 of node 'r' .relu., which has 1 output"),
    ([[1, 1, 0], [0, 0, 0]], [[2, 0, 0]], "'a'.*reads output 1 of node 'r'"),
    ([[0, 2 ** 31, 0], [1, 0, 0]], [[2, 0, 0]], "'a'.*reads input"),
    ([[0, 0, 0], [1, 0, 0]], [[1, 3, 0]], "outputs .heads. read output 3 of node 'r'"),
    ([[0, 0, 0], [1, 0, 0]], [[2, -1, 0]], "output .2, -1, 0. names no node"),
    ([[0, True, 0], [1, 0, 0]], [[2, 0, 0]], "reads input"),
], ids=["var-5", "var-neg", "op-5", "op-1", "var-2**31", "head-3", "head-neg", "bool"])
def test_reference_to_a_missing_output_refused_before_mxnet(inputs, heads, match):
    """Each of these crashes the process inside MXNet (SIGSEGV) or makes it misread memory when MXNet loads it."""
    with pytest.raises(ModelFileError, match=match):
        fxc.from_mxnet(graph_reading(inputs, heads), {}, shapes={"x": (2, 3)})


def test_reference_to_a_multi_output_node():
    """A SliceChannel's second output is there to be read; its third is not (MXNet counts them)."""
    def split(ref):
        return json.dumps({"nodes": [{"op": "null", "name": "x", "inputs": []},
                                     {"op": "SliceChannel", "name": "s", "attrs": {"num_outputs": "2"},
                                      "inputs": [[0, 0, 0]]},
                                     {"op": "relu", "name": "r", "inputs": [ref]}],
                           "arg_nodes": [0], "heads": [[2, 0, 0]]})
    check_outputs_read(parse_symbol_json(split([1, 1, 0])), mx, "the symbol")
    with pytest.raises(ModelFileError, match="output 2 of node 's' .SliceChannel., which has 2 output"):
        check_outputs_read(parse_symbol_json(split([1, 2, 0])), mx, "the symbol")


@pytest.mark.parametrize("shape", [(2 ** 40,), (1, 2 ** 40), (3, -1)])
def test_input_dims_mxnet_cannot_hold(shape):
    """2**40 elements in one dim: MXNet's shape inference raises a bare Exception; fxc names the input first
    (nothing of that size is allocated)."""
    text = graph_reading([[0, 0, 0], [1, 0, 0]])
    with pytest.raises(ShapeError, match=r"input 'x'.*between 0 and 2147483647"):
        fxc.from_mxnet(text, {}, shapes={"x": shape})
    model = fxc.from_mxnet(text, {})            # shapes from the first call: the same check at the build
    with pytest.raises(ShapeError, match=r"input 'x'"):
        model._build({"x": shape}, {"x": "float32"})
