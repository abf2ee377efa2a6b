"""Every registry op, every sample: the compiled kernel against the op's numpy reference, and the
numpy reference against torch eager where the op has a plain ATen overload. Generated from the registry."""
import numpy as np
import pytest
import torch

from fxc.driver.build import build
from fxc.ops.registry import all_ops, aten_table
from fxc.relay_like.builder import Builder
from tests.helpers import assert_close_np

CASES = [(name, k) for name, op in sorted(all_ops().items()) if op.samples and op.compute
         for k in range(len(op.samples(np.random.default_rng(0))))]


def sample(name, k):
    return all_ops()[name].samples(np.random.default_rng(k))[k]


@pytest.mark.cpu_targets
@pytest.mark.parametrize("name,k", CASES, ids=[f"{n}-{k}" for n, k in CASES])
def test_op_matches_reference(name, k, target):
    arrays, attrs = sample(name, k)
    op = all_ops()[name]
    b = Builder()
    ins = [b.graph.input(a.shape, str(a.dtype) if a.dtype != np.bool_ else "bool") for a in arrays]
    outs = b.graph.call(name, ins, **attrs)
    b.graph.outputs = list(outs)
    module = build(b.graph, target=target)
    got = module(*arrays)
    got = got if isinstance(got, list) else [got]
    ref = op.reference(*arrays, **attrs)
    ref = ref if isinstance(ref, tuple) else (ref,)
    for o, g, r in zip(outs, got, ref):
        r = np.asarray(r).astype(g.dtype)
        assert g.shape == tuple(o.shape)
        assert_close_np(g, r)


# A fixed sample of registry ops covering every fusion kind (every sample of the conv/matmul kind, whose schedules
# read the target's vector width and registers; float16/bfloat16 casts and packs, which need library helpers or
# instructions a lower ISA lacks), run on lower ISAs than this host's: their code must run here and be right.
LOWER_ISAS = ("llvm -mcpu=x86-64-v2",)      # llvm -mcpu=haswell runs the whole matrix (cpu_targets, tests/targets.py)
LOWER_ISA_OPS = {
    "elementwise": ["cast", "exp", "erf", "gelu", "sigmoid", "tanh", "log1p", "round", "frexp"],
    "broadcast": ["add", "div", "pow", "where", "fmod"],
    "injective": ["cat", "gather", "pack_lanes", "pack_bf16_pairs", "pad", "permute", "index"],
    "reduction": ["sum", "amax", "mean", "avg_pool2d", "max_pool2d_indices", "adaptive_avg_pool2d"],
    "out_elemwise_fusable": sorted(n for n, op in all_ops().items() if int(op.kind) == 4),
    "opaque": ["cumsum", "argmax", "softmax", "log_softmax", "layer_norm", "max_pool2d", "sort", "cholesky",
               "matrix_exp", "winograd_weight", "scatter", "index_put"],
}
LOWER_ISA_CASES = [(name, k) for names in LOWER_ISA_OPS.values() for name in names for n, k in CASES if n == name]


@pytest.mark.parametrize("isa", LOWER_ISAS)
@pytest.mark.parametrize("name,k", LOWER_ISA_CASES, ids=[f"{n}-{k}" for n, k in LOWER_ISA_CASES])
def test_op_on_a_lower_isa(name, k, isa):
    """The op's kernel built for a lower ISA (AVX2, SSE4.2) runs on this host and matches the reference."""
    from fxc.target import Target, host_features
    missing = Target.parse(isa).caps.features - host_features()
    if missing:
        pytest.skip(f"this host's CPU lacks {', '.join(sorted(missing))}")
    test_op_matches_reference(name, k, isa)


def test_lower_isa_sample_covers_every_op_kind():
    kinds = {int(op.kind) for op in all_ops().values() if op.samples and op.compute}
    assert {int(all_ops()[n].kind) for n, _ in LOWER_ISA_CASES} == kinds


DEFAULT_ATEN = sorted((t, op.name) for t, (op, conv) in aten_table().items() if op is not None and conv is None)


@pytest.mark.parametrize("target_name,name", DEFAULT_ATEN)
def test_reference_matches_torch(target_name, name):
    """The numpy reference agrees with the ATen op it claims to implement (positional tensor args)."""
    op = all_ops()[name]
    if not op.samples:
        pytest.skip("no samples")
    ns, ov = target_name.split(".")[1:]
    fn = getattr(getattr(torch.ops.aten, ns), ov)
    for arrays, attrs in op.samples(np.random.default_rng(0)):
        if attrs:
            continue
        if ov == "Scalar" and len(arrays) == 2:
            arrays = [arrays[0], arrays[1].reshape(-1)[0].item() if arrays[1].size else 1]
        try:
            expected = fn(*[torch.from_numpy(np.array(a)) if isinstance(a, np.ndarray) else a for a in arrays])
        except (RuntimeError, TypeError):
            continue   # torch rejects this dtype/shape combination for this overload
        ref = op.reference(*[np.asarray(a) for a in arrays])
        exp = expected.numpy()
        assert_close_np(np.asarray(ref).astype(exp.dtype), exp)


def test_every_op_is_complete():
    for name, op in all_ops().items():
        if name == "constant":
            continue
        assert op.compute is not None, name
        assert op.samples is not None, f"{name} has no samples"
        assert op.reference is not None, name
