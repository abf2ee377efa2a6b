"""Bad inputs to fxc.from_mxnet: each a named fxc.errors error that names the file, node or parameter."""
import json

import numpy as np
import pytest

import fxc
from fxc.errors import InputError, ModelFileError, ShapeError

from .test_mxnet import SHAPE, data, mx, mxnet_forward, small_net


@pytest.fixture
def checkpoint(tmp_path):
    sym, args, aux = small_net()
    mx.model.save_checkpoint(str(tmp_path / "net"), 0, sym, args, aux)
    return tmp_path / "net", sym, args, aux


def test_truncated_and_corrupt_symbol_json(checkpoint, tmp_path):
    _, _, args, aux = checkpoint
    text = (tmp_path / "net-symbol.json").read_text()
    (tmp_path / "cut.json").write_text(text[: len(text) // 2])
    with pytest.raises(ModelFileError, match="cut.json.*not valid JSON"):
        fxc.from_mxnet(tmp_path / "cut.json", (args, aux))
    (tmp_path / "cut-symbol.json").write_text(text[: len(text) // 2])
    (tmp_path / "cut-0000.params").write_bytes((tmp_path / "net-0000.params").read_bytes())
    with pytest.raises(ModelFileError, match="truncated or corrupt"):
        fxc.from_mxnet(str(tmp_path / "cut"))
    (tmp_path / "bin.json").write_bytes(b"\x89PNG\xff\xfe garbage")
    with pytest.raises(ModelFileError, match="corrupt"):
        fxc.from_mxnet(tmp_path / "bin.json", (args, aux))
    with pytest.raises(ModelFileError, match="not an MXNet symbol"):
        fxc.from_mxnet('{"hello": 1}', (args, aux))
    graph = json.loads(text)
    graph["nodes"][2]["inputs"] = [[7, 0, 0]]          # a node reading a later node
    with pytest.raises(ModelFileError, match=repr(graph["nodes"][2]["name"])):
        fxc.from_mxnet(json.dumps(graph), (args, aux))
    with pytest.raises(ModelFileError, match="neither"):
        fxc.from_mxnet(str(tmp_path / "nothing"))


def test_truncated_and_corrupt_params_file(checkpoint, tmp_path):
    sym = checkpoint[1]
    blob = (tmp_path / "net-0000.params").read_bytes()
    for name, content in (("cut", blob[: len(blob) - 40]), ("junk", b"not a params file" * 10), ("empty", b"")):
        (tmp_path / f"{name}.params").write_bytes(content)
        with pytest.raises(ModelFileError, match=f"{name}.params.*(truncated or corrupt)"):
            fxc.from_mxnet(sym, str(tmp_path / f"{name}.params"))
    mx.nd.save(str(tmp_path / "list.params"), [mx.nd.ones(3)])
    with pytest.raises(ModelFileError, match="unnamed"):
        fxc.from_mxnet(sym, str(tmp_path / "list.params"))
    with pytest.raises(ModelFileError, match="does not exist"):
        fxc.from_mxnet(sym, str(tmp_path / "missing.params"))


def test_missing_extra_misshaped_and_wrong_kind_params():
    sym, args, aux = small_net()
    without_fc = {k: v for k, v in args.items() if k != "fc0_weight"}
    with pytest.raises(InputError, match="'fc0_weight'.*missing from params"):
        fxc.from_mxnet(sym, (without_fc, aux), shapes={"data": SHAPE})
    m = fxc.from_mxnet(sym, (without_fc, aux))            # shapes from the first call: the call says it
    with pytest.raises(InputError, match="fc0_weight"):
        m(data())
    with pytest.raises(InputError, match="bn0_moving_var"):
        fxc.from_mxnet(sym, (args, {k: v for k, v in aux.items() if k != "bn0_moving_var"}))
    with pytest.raises(InputError, match="'extra_w' is not an argument"):
        fxc.from_mxnet(sym, ({**args, "extra_w": mx.nd.ones(3)}, aux))
    bad = {**args, "conv0_weight": mx.nd.ones((6, 3, 5, 5))}
    with pytest.raises(ShapeError, match=r"'conv0_weight' has shape \(6, 3, 5, 5\).*needs \(6, 3, 3, 3\)"):
        fxc.from_mxnet(sym, (bad, aux), shapes={"data": SHAPE})
    with pytest.raises(InputError, match="'fc0_bias' is a list"):
        fxc.from_mxnet(sym, ({**args, "fc0_bias": [1.0] * 5}, aux))
    with pytest.raises(InputError, match="not inputs"):
        fxc.from_mxnet(sym, (args, aux), shapes={"image": SHAPE})


def test_input_shape_that_contradicts_the_model():
    sym, args, aux = small_net()
    with pytest.raises(ShapeError, match=r"'conv0_weight'.*input\(s\) data \(2, 4, 10, 10\)"):
        fxc.from_mxnet(sym, (args, aux), shapes={"data": (2, 4, 10, 10)})        # 4 channels, weights for 3
    with pytest.raises(ShapeError, match="fc0_weight"):
        fxc.from_mxnet(sym, (args, aux), shapes={"data": (2, 3, 16, 16)})        # FC weights for a 10x10 input
    m = fxc.from_mxnet(sym, (args, aux))
    with pytest.raises(ShapeError, match="contradict"):
        m(np.zeros((2, 3, 10), np.float32))                                       # 3-d into a 2-d conv
    with pytest.raises(InputError, match="takes 1 input"):
        m(data(), data())
    x = data()          # the failed first calls left nothing half-built: a good call compiles and runs
    np.testing.assert_allclose(m(x), mxnet_forward(sym, args, aux, data=x)[0], rtol=1e-5, atol=1e-5)
    assert m.module.inputs[0].shape == SHAPE
