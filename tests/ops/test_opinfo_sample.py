"""A fixed sample of PyTorch's OpInfo database through torch.compile(backend="fxc") vs eager (the full sweep is
`python -m fxc.testing.opinfo`). Every op must be correct; the ones fxc implements must compile without
falling back to eager."""
import pytest

from fxc.testing import opinfo

COMPILED = [   # fxc compiles every sample of these (tricky ones included: rounding modes, 0-d, NaN, broadcasting)
    "abs", "add", "addcdiv", "addmm", "atan2", "baddbmm", "bmm", "clamp", "div.floor_rounding", "div.trunc_rounding",
    "floor_divide", "fmod", "remainder", "frac", "expand", "flip", "logical_xor", "masked_fill", "max.binary",
    "max.reduction_no_dim", "max.reduction_with_dim", "min.reduction_with_dim", "maximum", "softmax", "log_softmax",
    "nn.functional.conv2d", "nn.functional.max_pool2d", "nn.functional.avg_pool2d", "nn.functional.layer_norm",
    "nn.functional.linear", "nn.functional.pad.constant", "nn.functional.hardswish", "nn.functional.leaky_relu",
    "var_mean", "sign", "where", "cross", "nn.functional.cross_entropy", "matmul", "heaviside",
    # empty inputs, 0-d indices, view-copies, 3-d conv/pool and ATen compositions
    "mm", "cat", "gather", "take", "trace", "diagonal_scatter", "unfold", "round.decimals_3", "addbmm",
    "nn.functional.conv3d", "nn.functional.conv_transpose3d", "nn.functional.avg_pool3d", "searchsorted",
    "nonzero_static", "index_reduce.mean", "nn.functional.embedding_bag", "nn.functional.bilinear",
]
ANY = [        # correct either way: compiled, or (today, or while another op family lands) eager fallback
    "cumsum", "sort", "nn.functional.conv_transpose2d", "nn.functional.interpolate.bilinear", "index_put",
    "nn.functional.embedding", "aminmax", "topk", "scatter_add", "nn.functional.grid_sample",
]


@pytest.fixture(scope="module")
def ops():
    return {opinfo.op_key(o): o for o in opinfo.select_ops(set(COMPILED + ANY))}


@pytest.mark.parametrize("key", COMPILED + ANY)
def test_opinfo(key, ops, target):
    assert key in ops, f"{key} is not in this torch's OpInfo database"
    r = opinfo.run_op(ops[key], target, max_samples=3)
    assert r["status"] in ("compiled", "fallback"), f"{key}: {r['status']}: {r['error']}"
    if key in COMPILED:
        assert r["status"] == "compiled", f"{key} fell back to eager: {r['fallback']}"
