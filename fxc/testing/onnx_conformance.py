"""ONNX conformance: the onnx wheel's backend node test cases and its `light` models through fxc (or a peer).

    python -m fxc.testing.onnx_conformance [--backend fxc|onnxruntime] [--json report.json] [--all-dtypes]
                                           [--filter REGEX] [--no-models] [--no-nodes]

Node cases come from `onnx.backend.test.case.node.collect_testcases`; by default only those whose graph inputs
and outputs are all float32, int32, int64 or bool tensors (the goal set; `--all-dtypes` runs every case). Each
case is compiled and run on each of its data sets and compared as onnx's own backend runner does (same shape and
dtype, `np.testing.assert_allclose` with the case's rtol/atol). The light models (`onnx/backend/test/data/light`,
weights made by ConstantOfShape) run on the inputs onnx's runner generates (`arange(n).reshape(shape) / n`) against
their stored outputs. A case is *pass*, *fail* (a wrong answer or a crash) or *unsupported* (fxc said which op or
dtype it cannot compile: an UnsupportedOpError); totals are printed per op and overall, and `--json` writes them
with every case's message.
"""
from __future__ import annotations

import argparse
import collections
import json
import re
import sys
import time
import traceback
from pathlib import Path

import numpy as np
import onnx
from onnx import numpy_helper
from onnx.backend.test.case.node import collect_testcases

import fxc
from fxc.errors import UnsupportedOpError
from fxc.runtime.store import atomic_write

GOAL_TYPES = {1, 6, 7, 9}       # float32, int32, int64, bool


def _tensor_types(vis) -> list:
    return [vi.type.tensor_type.elem_type if vi.type.HasField("tensor_type") else None for vi in vis]


def goal_case(model) -> bool:
    g = model.graph
    return all(t in GOAL_TYPES for t in _tensor_types(list(g.input) + list(g.output)))


def node_cases(all_dtypes: bool = False, pattern: str | None = None) -> list:
    """(name, op, model, data_sets, rtol, atol) of the node test cases, in name order."""
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cases = collect_testcases(None)
    single = {c.name: c.model.graph.node[0].op_type for c in cases if len(c.model.graph.node) == 1}
    out = []
    for c in sorted(cases, key=lambda c: c.name):
        if not all_dtypes and not goal_case(c.model):
            continue
        if pattern and not re.search(pattern, c.name):
            continue
        out.append((c.name, case_op(c, single), c.model, c.data_sets, c.rtol, c.atol))
    return out


def case_op(case, single: dict) -> str:
    """The op a case tests: its one node's, or for an expanded function body the op of the case it expands."""
    if case.name in single:
        return single[case.name]
    base = re.sub(r"_expanded(_ver\d+)?$", "", case.name)
    if base in single:
        return single[base]
    ops = [n.op_type for n in case.model.graph.node]
    return collections.Counter(ops).most_common(1)[0][0] if ops else "?"


def light_models(pattern: str | None = None) -> list:
    """(name, model path, inputs, expected outputs) of the light models (those whose name matches the regular
    expression `pattern`, when given), inputs as onnx's runner makes them."""
    root = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"
    out = []
    for path in sorted(root.glob("light_*.onnx")):
        if pattern and not re.search(pattern, path.stem):
            continue
        model = onnx.load(str(path))
        inits = {t.name for t in model.graph.initializer}
        inputs = []
        for vi in model.graph.input:
            if vi.name in inits:
                continue
            shape = tuple(d.dim_value if d.HasField("dim_value") else 1 for d in vi.type.tensor_type.shape.dim)
            n = int(np.prod(shape))
            inputs.append((np.arange(n).reshape(shape) / n).astype(np.float32))
        expected = []
        for i in range(len(model.graph.output)):
            t = onnx.TensorProto()
            t.ParseFromString((path.parent / f"{path.stem}_output_{i}.pb").read_bytes())
            expected.append(numpy_helper.to_array(t))
        out.append((path.stem, path, inputs, expected))
    return out


class FxcBackend:
    name = "fxc"

    def prepare(self, model):
        return fxc.from_onnx(model)

    def run(self, prepared, inputs):
        out = prepared(*inputs)
        return list(out) if isinstance(out, tuple) else [out]

    @staticmethod
    def unsupported(e: BaseException) -> bool:
        return isinstance(e, UnsupportedOpError)


class OrtBackend:
    name = "onnxruntime"

    def prepare(self, model):
        import onnxruntime as ort  # deferred: onnxruntime is a reference peer, optional
        so = ort.SessionOptions()
        so.intra_op_num_threads = 1
        so.log_severity_level = 4
        try:
            sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
        except Exception as e:    # a model onnxruntime does not implement: its own "unsupported"
            raise _Unsupported(str(e)) from e
        return sess

    def run(self, sess, inputs):
        feeds = {i.name: x for i, x in zip(sess.get_inputs(), inputs)}
        return sess.run(None, feeds)

    @staticmethod
    def unsupported(e: BaseException) -> bool:
        return isinstance(e, _Unsupported)


class _Unsupported(Exception):
    pass


def compare(outputs, expected, rtol, atol) -> None:
    """onnx's backend runner's check: as many outputs, same shapes and dtypes, allclose."""
    np.testing.assert_equal(len(outputs), len(expected))
    for out, ref in zip(outputs, expected):
        out = np.asarray(out)
        np.testing.assert_array_equal(out.shape, ref.shape, err_msg="incorrect shape")
        if ref.dtype == object:
            np.testing.assert_array_equal(out, ref)
        else:
            np.testing.assert_equal(out.dtype, ref.dtype)
            np.testing.assert_allclose(out, ref, rtol=rtol, atol=atol)


def _array(x) -> np.ndarray:
    """A data set's tensor as numpy (some cases store TensorProtos, as onnx's runner normalises them)."""
    return numpy_helper.to_array(x) if isinstance(x, onnx.TensorProto) else np.asarray(x)


def run_case(backend, model, data_sets, rtol, atol) -> tuple:
    """(status, message, seconds) of one case."""
    t0 = time.perf_counter()
    try:
        prepared = backend.prepare(model)
        for inputs, expected in data_sets:
            outputs = backend.run(prepared, [_array(x) for x in inputs])
            compare(outputs, [_array(e) for e in expected], rtol, atol)
        status, msg = "pass", ""
    except AssertionError as e:
        status, msg = "fail", "wrong result: " + " ".join(str(e).split())[:400]
    except Exception as e:      # noqa: BLE001  (a crash is a failure; fxc's UnsupportedOpError is "unsupported")
        status = "unsupported" if backend.unsupported(e) else "fail"
        msg = f"{type(e).__name__}: " + " ".join(str(e).split())[:400]
        if status == "fail" and not msg.strip():
            msg = traceback.format_exc(limit=3)
    return status, msg, time.perf_counter() - t0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--backend", choices=("fxc", "onnxruntime"), default="fxc")
    ap.add_argument("--json", help="write the report (every case, per-op totals) here")
    ap.add_argument("--all-dtypes", action="store_true", help="every node case, not only the goal set")
    ap.add_argument("--filter", help="only the node cases and light models whose name matches this regular "
                                     "expression (e.g. 'conv|light_resnet50')")
    ap.add_argument("--no-models", action="store_true", help="skip the light models")
    ap.add_argument("--no-nodes", action="store_true", help="skip the node cases")
    ap.add_argument("--quiet", action="store_true", help="print the totals only")
    args = ap.parse_args(argv)
    backend = FxcBackend() if args.backend == "fxc" else OrtBackend()
    records = []
    if not args.no_nodes:
        for name, op, model, data_sets, rtol, atol in node_cases(args.all_dtypes, args.filter):
            status, msg, secs = run_case(backend, model, data_sets, rtol, atol)
            records.append({"kind": "node", "name": name, "op": op, "status": status, "message": msg,
                            "seconds": round(secs, 3)})
            if not args.quiet and status != "pass":
                print(f"{status:12s} {name}: {msg[:160]}", flush=True)
    if not args.no_models:
        for name, path, inputs, expected in light_models(args.filter):
            status, msg, secs = run_case(backend, onnx.load(str(path)), [(inputs, expected)], 1e-3, 1e-7)
            records.append({"kind": "model", "name": name, "op": "(model)", "status": status, "message": msg,
                            "seconds": round(secs, 3)})
            print(f"{status:12s} {name} ({secs:.1f} s) {msg[:160]}", flush=True)
    report = summarize(records, backend.name, args)
    print_report(report, args.quiet)
    if args.json:
        atomic_write(args.json, json.dumps(report, indent=1).encode())
    return 0


def summarize(records: list, backend: str, args) -> dict:
    per_op: dict = collections.defaultdict(lambda: {"pass": 0, "fail": 0, "unsupported": 0})
    totals = {k: collections.Counter() for k in ("node", "model")}
    for r in records:
        totals[r["kind"]][r["status"]] += 1
        if r["kind"] == "node":
            per_op[r["op"]][r["status"]] += 1
    tot = {}
    for kind, c in totals.items():
        n = sum(c.values())
        tot[kind] = {"cases": n, "pass": c["pass"], "fail": c["fail"], "unsupported": c["unsupported"],
                     "pass_rate": round(c["pass"] / n, 4) if n else None}
    return {"backend": backend, "onnx": onnx.__version__, "node_set": "all" if args.all_dtypes else
            "float32/int32/int64/bool", "filter": args.filter, "totals": tot,
            "ops": dict(sorted(per_op.items())), "cases": records}


def print_report(report: dict, quiet: bool = False) -> None:
    if not quiet and report["ops"]:
        print(f"\n{'op':28s} {'pass':>5s} {'fail':>5s} {'unsup':>6s}")
        for op, c in report["ops"].items():
            print(f"{op:28s} {c['pass']:5d} {c['fail']:5d} {c['unsupported']:6d}")
    for kind, t in report["totals"].items():
        if t["cases"]:
            print(f"{report['backend']} {kind} cases ({report['node_set'] if kind == 'node' else 'light'}): "
                  f"{t['pass']}/{t['cases']} pass ({100 * t['pass_rate']:.1f}%), {t['fail']} fail, "
                  f"{t['unsupported']} unsupported")


if __name__ == "__main__":
    sys.exit(main())
