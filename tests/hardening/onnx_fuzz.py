"""A randomised ONNX fuzz of fxc.from_onnx: small serialised models, damaged by bit flips, truncations and random
attribute (and small integer initializer) values, each compiled and run by fxc and by onnx's reference evaluator.

Every mutant must end in one of: an fxc.errors error (a refusal, at from_onnx or at the call), or the reference
evaluator's result (same shapes, values within float32 rounding). Anything else is a finding: another exception
("crash"), a different result ("wrong"), a result where the reference evaluator refuses the model ("ran"), or a
case over the time limit ("slow"). A mutant given a NaN or infinite float attribute whose result differs is
counted apart ("inexact"), not a finding: onnx's reference evaluator is no oracle there (its LeakyRelu computes
x * alpha for every x, so alpha=-inf gives NaN where the spec gives x), nor is one the reference evaluator
cannot allocate or takes over the time limit to compute, or cannot compute at all (REFERENCE_GAPS) ("unknown":
fxc computes a huge pad read at two columns without materialising it).

    python -m tests.hardening.onnx_fuzz --n 5000 [--seed 0] [--timeout 20] [--memory-gib 8] [-v]

prints each finding (with the seed and index that rebuild its mutant: `--only SEED:INDEX`) and the counts;
exit status 1 when there is a finding. tests/hardening/test_onnx_fuzz.py runs a fixed small sample of it.
"""
from __future__ import annotations

import argparse
import collections
import random
import resource
import signal
import sys
import time
import traceback
import warnings

import numpy as np
import onnx
from onnx import TensorProto as T, helper as h, numpy_helper
from onnx.reference import ReferenceEvaluator

import fxc
from fxc.errors import FxcError

MAX_INPUT_ELEMENTS = 1 << 16    # a mutant whose inputs declare more is not run (it would only measure allocation)
OPSET = 18


def _model(name, nodes, inputs, outputs, inits=()):
    g = h.make_graph(nodes, name, inputs, outputs, list(inits))
    return h.make_model(g, opset_imports=[h.make_opsetid("", OPSET)], ir_version=9)


def _init(name, a):
    return numpy_helper.from_array(np.asarray(a), name)


def seed_models() -> list:
    """The small models every mutant starts from: dense, convolution, axes and shape arithmetic."""
    rng = np.random.default_rng(0)
    f32 = np.float32
    vi = h.make_tensor_value_info
    mlp = _model("mlp", [
        h.make_node("MatMul", ["x", "w"], ["m"]), h.make_node("Add", ["m", "b"], ["a"]),
        h.make_node("Relu", ["a"], ["r"]), h.make_node("Softmax", ["r"], ["y"], axis=-1),
    ], [vi("x", T.FLOAT, [2, 4])], [vi("y", T.FLOAT, [2, 3])],
        [_init("w", rng.normal(size=(4, 3)).astype(f32)), _init("b", rng.normal(size=3).astype(f32))])
    conv = _model("conv", [
        h.make_node("Conv", ["x", "k"], ["c"], pads=[1, 1, 1, 1], strides=[1, 1], kernel_shape=[3, 3]),
        h.make_node("LeakyRelu", ["c"], ["r"], alpha=0.1),
        h.make_node("MaxPool", ["r"], ["p"], kernel_shape=[2, 2], strides=[2, 2]),
        h.make_node("Flatten", ["p"], ["y"], axis=1),
    ], [vi("x", T.FLOAT, [1, 2, 5, 5])], [vi("y", T.FLOAT, [1, 12])],
        [_init("k", rng.normal(size=(3, 2, 3, 3)).astype(f32))])
    axes = _model("axes", [
        h.make_node("ReduceSum", ["x", "ax1"], ["s"], keepdims=1),
        h.make_node("Transpose", ["s"], ["t"], perm=[2, 0, 1]),
        h.make_node("Unsqueeze", ["t", "ax0"], ["u"]), h.make_node("Squeeze", ["u", "ax0"], ["q"]),
        h.make_node("Concat", ["q", "q"], ["c"], axis=0),
        h.make_node("CumSum", ["c", "cax"], ["cs"], reverse=1),
        h.make_node("LogSoftmax", ["cs"], ["y"], axis=1),
    ], [vi("x", T.FLOAT, [2, 3, 4])], [vi("y", T.FLOAT, [8, 2, 1])],
        [_init("ax1", np.array([1], np.int64)), _init("ax0", np.array([0], np.int64)),
         _init("cax", np.array(1, np.int64))])
    shape = _model("shape", [
        h.make_node("Shape", ["x"], ["sh"]),
        h.make_node("Gather", ["sh", "i1"], ["d1"], axis=0),
        h.make_node("Concat", ["d1", "m1"], ["ns"], axis=0),
        h.make_node("Reshape", ["x", "ns"], ["rx"]),
        h.make_node("Slice", ["rx", "st", "en", "sax", "ste"], ["sl"]),
        h.make_node("Split", ["sl"], ["a", "b"], axis=1, num_outputs=2),
        h.make_node("Pad", ["a", "pads"], ["pa"], mode="constant"),
        h.make_node("Gather", ["pa", "gi"], ["g"], axis=1),
        h.make_node("ConstantOfShape", ["cs"], ["ones"], value=_init("v", np.array([1.0], f32))),
        h.make_node("Range", ["r0", "r1", "r2"], ["rg"]),
        h.make_node("Mul", ["g", "ones"], ["gm"]),
        h.make_node("Add", ["gm", "rg"], ["y"]),
    ], [vi("x", T.FLOAT, [2, 3, 2])], [vi("y", T.FLOAT, [3, 2])],
        [_init("i1", np.array([1], np.int64)), _init("m1", np.array([-1], np.int64)),
         _init("st", np.array([0, 1], np.int64)), _init("en", np.array([3, 5], np.int64)),
         _init("sax", np.array([0, 1], np.int64)), _init("ste", np.array([1, 1], np.int64)),
         _init("pads", np.array([0, 1, 0, 0], np.int64)), _init("gi", np.array([0, 2], np.int64)),
         _init("cs", np.array([3, 2], np.int64)), _init("r0", np.array(0, f32)), _init("r1", np.array(2, f32)),
         _init("r2", np.array(1, f32))])
    upsample = _model("upsample", [
        h.make_node("ConvTranspose", ["x", "kt"], ["ct"], strides=[2, 2], kernel_shape=[2, 2]),
        h.make_node("AveragePool", ["ct"], ["ap"], kernel_shape=[3, 3], pads=[1, 1, 1, 1], count_include_pad=0),
        h.make_node("Resize", ["ap", "", "sc"], ["rs"], mode="nearest"),
        h.make_node("LayerNormalization", ["rs", "ls"], ["y"], axis=-1, epsilon=1e-5),
    ], [vi("x", T.FLOAT, [1, 2, 3, 3])], [vi("y", T.FLOAT, [1, 2, 12, 12])],
        [_init("kt", rng.normal(size=(2, 2, 2, 2)).astype(f32)), _init("sc", np.array([1, 1, 2, 2], f32)),
         _init("ls", rng.normal(size=12).astype(f32))])
    pick = _model("pick", [
        h.make_node("Gemm", ["x", "gw", "gc"], ["gm"], alpha=0.5, beta=2.0, transB=1),
        h.make_node("TopK", ["gm", "k"], ["v", "i"], axis=-1, largest=1),
        h.make_node("Expand", ["v", "es"], ["e"]),
        h.make_node("Tile", ["e", "rep"], ["t"]),
        h.make_node("ReduceMax", ["t", "ra"], ["y"], keepdims=0),
        h.make_node("OneHot", ["i", "depth", "onoff"], ["y2"], axis=-1),
    ], [vi("x", T.FLOAT, [3, 4])], [vi("y", T.FLOAT, [3, 4]), vi("y2", T.FLOAT, [3, 2, 5])],
        [_init("gw", rng.normal(size=(5, 4)).astype(f32)), _init("gc", rng.normal(size=5).astype(f32)),
         _init("k", np.array([2], np.int64)), _init("es", np.array([2, 3, 2], np.int64)),
         _init("rep", np.array([1, 1, 2], np.int64)), _init("ra", np.array([0], np.int64)),
         _init("depth", np.array(5, np.int64)), _init("onoff", np.array([0.0, 1.0], f32))])
    models = [mlp, conv, axes, shape, upsample, pick]
    for m in models:
        onnx.checker.check_model(m)
    return models


# -- mutations -----------------------------------------------------------------------------------------------------
INTS = (-(2 ** 63), -(2 ** 31), -7, -3, -2, -1, 0, 1, 2, 3, 4, 5, 7, 2 ** 31, 10 ** 12)
FLOATS = (float("nan"), float("inf"), -float("inf"), -1.0, 0.0, 0.5, 1e30, -1e-30)
STRINGS = ("", "constant", "reflect", "edge", "wrap", "NOTSET", "SAME_UPPER", "VALID", "DCR", "CRD", "\xff", "x" * 300)


def _value(rng: random.Random, old):
    if isinstance(old, float):
        return rng.choice(FLOATS + (old * rng.uniform(-4, 4),))
    return rng.choice(INTS + (old + rng.randint(-3, 3),))


def _finite(m: onnx.ModelProto) -> bool:
    """No float attribute of the model is NaN or infinite."""
    return all(np.isfinite(a.f) and np.isfinite(list(a.floats)).all() for n in m.graph.node for a in n.attribute)


def mutate_attribute(rng: random.Random, m: onnx.ModelProto) -> str:
    """A random attribute value, or an element of a small integer initializer (axes, shapes, pads...)."""
    attrs = [(n, a) for n in m.graph.node for a in n.attribute
             if a.type in (a.INT, a.INTS, a.FLOAT, a.FLOATS, a.STRING)]
    small = [t for t in m.graph.initializer if t.data_type == T.INT64 and np.prod(t.dims, dtype=np.int64) <= 8]
    if small and (not attrs or rng.random() < 0.4):
        t = rng.choice(small)
        a = numpy_helper.to_array(t).copy()
        flat = a.reshape(-1)
        if flat.size and rng.random() < 0.8:
            k = rng.randrange(flat.size)
            flat[k] = np.int64(max(min(_value(rng, int(flat[k])), 2 ** 63 - 1), -(2 ** 63)))
        else:
            a = np.append(flat, rng.choice(INTS[2:-2])).astype(np.int64)
        t.CopyFrom(numpy_helper.from_array(a, t.name))
        return f"initializer {t.name} = {a.tolist()}"
    node, a = rng.choice(attrs)
    if a.type == a.INT:
        a.i = max(min(_value(rng, a.i), 2 ** 63 - 1), -(2 ** 63))
    elif a.type == a.FLOAT:
        a.f = _value(rng, a.f)
    elif a.type == a.STRING:
        a.s = rng.choice(STRINGS).encode("utf-8", "surrogateescape")
    elif a.type == a.INTS:
        vals = list(a.ints)
        op = rng.random()
        if vals and op < 0.6:
            k = rng.randrange(len(vals))
            vals[k] = max(min(_value(rng, vals[k]), 2 ** 63 - 1), -(2 ** 63))
        elif op < 0.8 and vals:
            vals.pop(rng.randrange(len(vals)))
        else:
            vals.append(rng.choice(INTS[2:-2]))
        a.ClearField("ints")
        a.ints.extend(vals)
    else:
        vals = list(a.floats) or [0.0]
        vals[rng.randrange(len(vals))] = _value(rng, 1.0)
        a.ClearField("floats")
        a.floats.extend(vals)
    return f"{node.op_type}.{a.name} = {h.get_attribute_value(a)!r}"[:200]


def mutant(seed: int, index: int, seeds: list) -> tuple:
    """(bytes, what was done, whether the reference is an oracle for it) of mutant `index` of the sweep with `seed`:
    its own random stream, so one case can be rebuilt alone."""
    rng = random.Random(seed * 1_000_003 + index)
    base = rng.choice(seeds)
    kind = rng.choice(("attribute", "attribute", "bitflip", "truncate"))
    if kind == "attribute":
        m = onnx.ModelProto()
        m.CopyFrom(base)
        said = [mutate_attribute(rng, m) for _ in range(rng.choice((1, 1, 2)))]
        return m.SerializeToString(), f"{base.graph.name}: " + "; ".join(said), _finite(m)
    data = bytearray(base.SerializeToString())
    if kind == "truncate":
        cut = rng.randrange(len(data))
        return bytes(data[:cut]), f"{base.graph.name}: truncated to {cut} of {len(data)} bytes", True
    flips = sorted(rng.randrange(len(data) * 8) for _ in range(rng.choice((1, 1, 2, 4, 8))))
    for b in flips:
        data[b // 8] ^= 1 << (b % 8)
    try:
        exact = _finite(onnx.load_model_from_string(bytes(data)))
    except Exception:       # noqa: BLE001  (bytes onnx cannot read: fxc must refuse them)
        exact = True
    return bytes(data), f"{base.graph.name}: bits {flips} flipped", exact


# -- one case ------------------------------------------------------------------------------------------------------
class _Slow(Exception):
    pass


def _feeds(model, rng: np.random.Generator):
    """Inputs of the shapes and types the model declares (a named dim: 2); None when too large or not numeric."""
    inits = {t.name for t in model.graph.initializer}
    feeds = {}
    for vi in model.graph.input:
        if vi.name in inits:
            continue
        tt = vi.type.tensor_type
        dims = [d.dim_value if d.HasField("dim_value") else 2 for d in tt.shape.dim]
        if any(d < 0 for d in dims) or np.prod(dims, dtype=np.float64) > MAX_INPUT_ELEMENTS:
            return None
        try:
            dt = onnx.helper.tensor_dtype_to_np_dtype(tt.elem_type)
        except (KeyError, ValueError, TypeError):
            return None
        if dt.kind == "f":
            feeds[vi.name] = rng.normal(size=dims).astype(dt)
        elif dt.kind in "iub":
            feeds[vi.name] = rng.integers(0, 3, size=dims).astype(dt)
        else:
            return None
    return feeds


def _same(a, b) -> bool:
    a, b = np.asarray(a), np.asarray(b)
    if a.shape != b.shape:
        return False
    if a.dtype.kind in "fc" or b.dtype.kind in "fc":
        a64, b64 = a.astype(np.float64), b.astype(np.float64)
        scale = np.nanmax(np.abs(b64[np.isfinite(b64)]), initial=1.0)
        return bool(np.allclose(a64, b64, rtol=1e-3, atol=1e-4 * scale, equal_nan=True))
    return bool(np.array_equal(a, b))


def run_case(data: bytes, timeout: float = 20.0, exact: bool = True) -> tuple:
    """(outcome, detail) for one mutant: outcome 'refused', 'equal', 'skipped' (inputs too large or not numeric),
    'inexact' (a result that differs where the reference is no oracle: not `exact`), 'unknown' (the reference
    cannot allocate what it would compare with), or a finding: 'crash',
    'wrong', 'ran', 'slow'."""
    def alarm(*_):
        raise _Slow()
    old = signal.signal(signal.SIGALRM, alarm)
    try:
        with warnings.catch_warnings(), np.errstate(all="ignore"):
            warnings.simplefilter("ignore")
            return _run(data, exact, timeout)
    except _Slow:
        return "slow", f"over {timeout} s"
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def _run(data: bytes, exact: bool, timeout: float) -> tuple:
    try:
        model = onnx.load_model_from_string(data)
    except Exception:       # noqa: BLE001  (fxc must refuse these bytes: checked below)
        model = None
    feeds = _feeds(model, np.random.default_rng(1)) if model is not None else {}
    if feeds is None:
        return "skipped", "inputs too large or not numeric"
    signal.setitimer(signal.ITIMER_REAL, timeout)        # fxc's time
    try:
        compiled = fxc.from_onnx(data)
        got = compiled(*feeds.values())
    except FxcError as e:
        return "refused", f"{type(e).__name__}: {str(e)[:160]}"
    except _Slow:
        raise
    except Exception as e:  # noqa: BLE001  (a finding: reported with its traceback)
        return "crash", f"{type(e).__name__}: {e}\n{traceback.format_exc(limit=-4)}"
    got = list(got) if isinstance(got, tuple) else [got]
    signal.setitimer(signal.ITIMER_REAL, timeout)        # the reference's own time
    try:
        want = ReferenceEvaluator(model).run(None, feeds)
    except _Slow:               # (fxc fuses what the reference materialises: a Tile of 2**27 rows reduced at once)
        return "unknown", f"fxc ran it; the reference evaluator takes over {timeout} s"
    except MemoryError as e:    # (fxc fuses what the reference materialises: a huge pad read at two columns)
        return "unknown", f"fxc ran it; the reference evaluator cannot allocate its tensors ({e})"
    except Exception as e:  # noqa: BLE001
        gap = next((why for says, why in REFERENCE_GAPS.items() if says in str(e)), None)
        if gap:
            return "unknown", f"fxc ran it; the reference evaluator cannot: {gap}"
        return "ran", f"fxc ran it; onnx's reference evaluator refuses it: {type(e).__name__}: {str(e)[:200]}"
    if len(got) != len(want) or not all(_same(g, w) for g, w in zip(got, want)):
        shapes = [[(np.shape(v), np.asarray(v).dtype.name) for v in vs] for vs in (got, want)]
        return ("wrong" if exact else "inexact"), (
            f"fxc {shapes[0]} != reference {shapes[1]}\n"
            f"fxc {np.asarray(got[0]).reshape(-1)[:6]} reference {np.asarray(want[0]).reshape(-1)[:6]}")
    return "equal", ""


FINDINGS = ("crash", "wrong", "ran", "slow")
# what onnx's reference evaluator refuses though ONNX (and ONNX Runtime, and fxc) compute it: its message -> why
REFERENCE_GAPS = {"index can't contain negative values": "Pad's negative pads crop; its np.pad refuses them"}


def sweep(n: int, seed: int = 0, timeout: float = 20.0, verbose: bool = False, only=None) -> tuple:
    """(counts by outcome, findings as (index, what, outcome, detail)) of `n` mutants of the sweep `seed`."""
    seeds, counts, findings = seed_models(), collections.Counter(), []
    for i in (only if only is not None else range(n)):
        data, what, exact = mutant(seed, i, seeds)
        if verbose:
            print(f"[{seed}:{i}] {what}", flush=True)
        t0 = time.perf_counter()
        outcome, detail = run_case(data, timeout, exact)
        counts[outcome] += 1
        if outcome in FINDINGS:
            findings.append((i, what, outcome, detail))
            print(f"FINDING [{seed}:{i}] {outcome}: {what}\n    {detail}", flush=True)
        elif verbose:
            print(f"    {outcome} ({time.perf_counter() - t0:.2f} s) {detail[:120]}", flush=True)
    return counts, findings


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=500, help="mutants to run")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--timeout", type=float, default=20.0, help="seconds one mutant may take")
    ap.add_argument("--only", help="SEED:INDEX[,INDEX...]: rebuild and run these mutants alone")
    ap.add_argument("--memory-gib", type=float, default=8.0,
                    help="this process's data limit: a mutant asking for more meets a MemoryError, not the swap")
    ap.add_argument("-v", "--verbose", action="store_true")
    args = ap.parse_args(argv)
    limit = int(args.memory_gib * 2 ** 30)
    resource.setrlimit(resource.RLIMIT_DATA, (limit, resource.getrlimit(resource.RLIMIT_DATA)[1]))
    seed, only = args.seed, None
    if args.only:
        s, _, idx = args.only.partition(":")
        seed, only = int(s), [int(i) for i in idx.split(",")]
    t0 = time.perf_counter()
    counts, findings = sweep(args.n, seed, args.timeout, args.verbose, only)
    print(f"{sum(counts.values())} mutants in {time.perf_counter() - t0:.0f} s: "
          + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())))
    print(f"{len(findings)} finding(s)" + (": " + ", ".join(f"{seed}:{i}" for i, *_ in findings) if findings
                                            else ""))
    return 1 if findings else 0


if __name__ == "__main__":
    sys.exit(main())
