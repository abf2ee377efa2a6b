"""int8 on the CPU (issue 43): fxc's build of PyTorch 2 export-quantized models against fxc fp32 and the int8 peers.

    .venv/bin/python -m benchmarks.int8                      # ResNet-18, MobileNetV2, BERT encoder; batch 1, 2 threads
    .venv/bin/python -m benchmarks.int8 --models resnet18 --runs 20 --agree 50 --target "llvm -mcpu=haswell"

Per model (fxc.testing.models, random weights, batch 1; BERT at --seq-len):
- static int8 (ResNet-18, MobileNetV2): PT2E (torchao's prepare_pt2e / convert_pt2e, where torch.ao's quantize_pt2e
  moved; the X86 quantizer: uint8 activations per tensor, int8 weights per channel) calibrated on random inputs; the
  fp32 model exported by torch.onnx.export and quantized by onnxruntime.quantization.quantize_static (QDQ, uint8
  activations, per-channel int8 weights) on the same calibration inputs.
- dynamic (BERT encoder): PT2E with the X86 quantizer's is_dynamic (its linears: per-call uint8 activations,
  per-channel int8 weights); onnxruntime.quantization.quantize_dynamic (per-channel int8 weights) of the same export.

Peers: fxc int8 (fxc.from_torch of the PT2E model), fxc int8 through torch.compile(backend="fxc"), fxc fp32
(fxc.from_torch of the fp32 model), ONNX Runtime int8 (the QDQ model), OpenVINO int8 (the same QDQ ONNX, read by
OpenVINO), Inductor (torch.compile with freezing of the PT2E model: its oneDNN int8 kernels). All timed
interleaved on the same input (benchmarks/run.py's time_interleaved: round-robin, rotating order, waits for the
previous runtime's threads to idle), every peer on --threads threads. Printed per model: median and min latency, and
fxc int8's time divided by each peer's (< 1: fxc int8 is faster).

Accuracy: the top-1 agreement of each int8 model with the fp32 model (PyTorch eager) on --agree random inputs (the
conv nets; for BERT, which has no classes, the mean cosine similarity of the hidden states), and fxc int8's output
against each int8 peer's on the timing input (max |difference|, top-1 agreement).
Writes benchmarks/results/int8-<UTC time>.json.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
STATIC = ("resnet18", "mobilenet_v2")
INT8_PEERS = ("fxc int8", "fxc int8 (torch.compile)", "onnxruntime int8", "openvino int8", "inductor int8")


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m benchmarks.int8", description=__doc__.split("\n\n")[0])
    p.add_argument("--models", default="resnet18,mobilenet_v2,bert")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--seq-len", type=int, default=128)
    p.add_argument("--runs", type=int, default=30, help="timed calls per peer (fewer when past --budget)")
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--budget", type=float, default=30.0, help="seconds of timed calls per peer and model")
    p.add_argument("--calibrate", type=int, default=4, help="random calibration inputs (PT2E and ONNX Runtime)")
    p.add_argument("--agree", type=int, default=200, help="random inputs for the accuracy figures (BERT: a quarter)")
    p.add_argument("--target", default=None, help='fxc\'s CPU target (e.g. "llvm -mcpu=haswell"); default the host')
    p.add_argument("--out", default=str(ROOT / "benchmarks" / "results"))
    return p.parse_args(argv)


# -- the quantized models --------------------------------------------------------------------------------------------
def random_inputs(name: str, seed: int, seq_len: int):
    from fxc.testing.models import example_inputs
    return example_inputs(name, batch=1, seq_len=seq_len, seed=seed)


def pt2e_model(model, inputs, calibration, dynamic: bool):
    """The PT2E-converted model. Strict export: the non-strict one merges the calls of a reused nn.ReLU (ResNet's
    blocks) into one source partition, which the X86 quantizer refuses ("more than one output node")."""
    import torch
    import torchao.quantization.pt2e.quantizer.x86_inductor_quantizer as xiq
    from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e
    quantizer = xiq.X86InductorQuantizer().set_global(xiq.get_default_x86_inductor_quantization_config(
        is_dynamic=dynamic))
    with torch.no_grad():
        prepared = prepare_pt2e(torch.export.export(model, inputs, strict=True).module(), quantizer)
        for batch in calibration:
            prepared(*batch)
        return convert_pt2e(prepared)


def onnx_int8(model, inputs, calibration, dynamic: bool, folder: str) -> str:
    """torch.onnx.export of the fp32 model, quantized by ONNX Runtime's tools; returns the int8 model's path."""
    from onnxruntime.quantization import (
        CalibrationDataReader,
        QuantFormat,
        QuantType,
        quantize_dynamic,
        quantize_static,
    )
    from onnxruntime.quantization.shape_inference import quant_pre_process

    from benchmarks.peers import export_onnx
    fp32, pre, int8 = (os.path.join(folder, f) for f in ("fp32.onnx", "pre.onnx", "int8.onnx"))
    export_onnx(model, inputs, fp32)
    quant_pre_process(fp32, pre)
    if dynamic:
        quantize_dynamic(pre, int8, weight_type=QuantType.QInt8, per_channel=True)
        return int8

    class Reader(CalibrationDataReader):
        def __init__(self):
            import onnxruntime as ort
            names = [i.name for i in ort.InferenceSession(pre, providers=["CPUExecutionProvider"]).get_inputs()]
            self.feeds = iter([dict(zip(names, (t.numpy() for t in batch))) for batch in calibration])

        def get_next(self):
            return next(self.feeds, None)
    quantize_static(pre, int8, Reader(), quant_format=QuantFormat.QDQ, per_channel=True,
                    activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8)
    return int8


# -- the peers -------------------------------------------------------------------------------------------------------
def build_ort(path: str, inputs, threads: int):
    import numpy as np
    import onnxruntime as ort

    from benchmarks.peers import Runner
    so = ort.SessionOptions()
    so.intra_op_num_threads, so.inter_op_num_threads = threads, 1
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    sess = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
    names = [i.name for i in sess.get_inputs()]

    def call(*ts):
        return sess.run(None, dict(zip(names, (t.numpy() for t in ts))))
    feeds = dict(zip(names, (t.numpy() for t in inputs)))
    return Runner(lambda: sess.run(None, feeds), lambda out: np.asarray(out[0], dtype=np.float32)), call


def build_openvino(path: str, inputs, threads: int):
    import numpy as np
    import openvino as ov

    from benchmarks.peers import Runner
    compiled = ov.Core().compile_model(ov.Core().read_model(path), "CPU",
                                       {"INFERENCE_NUM_THREADS": threads, "PERFORMANCE_HINT": "LATENCY"})
    request = compiled.create_infer_request()
    arrays = [t.numpy() for t in inputs]

    def run():
        request.infer(arrays)
        return request.get_output_tensor(0).data

    def call(*ts):
        request.infer([t.numpy() for t in ts])
        return [np.array(request.get_output_tensor(0).data)]
    hint = compiled.get_property("INFERENCE_PRECISION_HINT")
    note = f"float parts in {hint.to_string() if hasattr(hint, 'to_string') else hint}"
    return Runner(run, lambda out: np.array(out, dtype=np.float32), note=note), call


def build_peers(name: str, args, folder: str) -> tuple[dict, dict, dict, tuple]:
    """(peer -> Runner on the timing input, peer -> callable on any input, peer -> why it is unavailable, the timing
    input)."""
    import torch

    import fxc
    from benchmarks.peers import _private, _torch_runner
    from fxc.testing.models import make_model
    dynamic = name not in STATIC
    model = make_model(name).eval()
    inputs = random_inputs(name, 0, args.seq_len)
    calibration = [random_inputs(name, 1000 + i, args.seq_len) for i in range(args.calibrate)]
    q = pt2e_model(_private(model), inputs, calibration, dynamic)
    target = args.target or "llvm"
    runners, calls, missing = {}, {"fp32 eager": model, "PT2E eager": q}, {}

    def fxc_aot(m):
        with torch.no_grad():
            return fxc.from_torch(m, tuple(inputs), target=target)

    # each torch.compile peer compiles its own copy (a GraphModule's deepcopy has its own code object): two backends
    # on one forward would share Dynamo's cache of that code and recompile each other's entries call after call
    def fxc_compiled(m):
        compiled = torch.compile(m, backend="fxc", options={"target": target})
        with torch.no_grad():
            compiled(*inputs)
        return compiled

    def inductor(m):
        # freezing: how the X86 quantizer's models get Inductor's oneDNN int8 kernels. Set in Inductor's config while
        # it compiles (the first call): as torch.compile(options={"freezing": True}) it fails in torch 2.13 (the
        # prepack op has no fake-tensor kernel on that path), in the inference mode the timed calls use (another
        # grad mode recompiles, then without freezing). Where it fails, Inductor without freezing
        import torch._inductor.config as inductor_config
        frozen = torch.compile(m)
        try:
            with torch.inference_mode(), inductor_config.patch(freezing=True):
                frozen(*inputs)
            return frozen
        except Exception as e:
            from benchmarks.run import _short
            plain = torch.compile(m)
            runner = _torch_runner(plain, inputs)
            runner.note = f"without freezing, which fails: {_short(e)[:90]}"
            return runner, plain

    onnx = {}

    def ort():
        onnx.setdefault("path", onnx_int8(model, inputs, calibration, dynamic, folder))
        return build_ort(onnx["path"], inputs, args.threads)

    def openvino():
        onnx.setdefault("path", onnx_int8(model, inputs, calibration, dynamic, folder))
        return build_openvino(onnx["path"], inputs, args.threads)

    builds = {
        "fxc int8": lambda: fxc_aot(q),
        "fxc int8 (torch.compile)": lambda: fxc_compiled(_private(q)),
        "fxc fp32": lambda: fxc_aot(_private(model)),
        "onnxruntime int8": ort,
        "openvino int8": openvino,
        "inductor int8": lambda: inductor(_private(q)),
    }
    torch.set_num_threads(args.threads)
    for peer, build in builds.items():
        t0 = time.perf_counter()
        try:
            made = build()
            runner, call = made if isinstance(made, tuple) else (_torch_runner(made, inputs), made)
            runner.run()        # the first call (Inductor compiles then)
            runner.note = (runner.note + ", " if runner.note else "") + f"built in {time.perf_counter() - t0:.0f} s"
            runners[peer], calls[peer] = runner, call
        except Exception as e:      # a peer that fails is reported with its reason; the run goes on
            from benchmarks.run import _short
            missing[peer] = _short(e)
            print(f"{peer}: unavailable ({missing[peer]})", flush=True)
    return runners, calls, missing, inputs


# -- accuracy --------------------------------------------------------------------------------------------------------
def _numpy(out):
    import numpy as np

    from benchmarks.peers import _first
    out = _first(out)
    return out.detach().float().numpy() if hasattr(out, "detach") else np.asarray(out, dtype=np.float32)


def accuracy(name: str, calls: dict, args) -> dict:
    """Per int8 model: top-1 agreement with fp32 eager on random inputs (conv nets), or the mean cosine similarity of
    BERT's hidden states; and fxc int8's top-1 agreement with each int8 peer on the same inputs."""
    import numpy as np
    import torch
    n = args.agree if name in STATIC else max(1, args.agree // 4)
    models = [p for p in ("fxc int8", "PT2E eager", "onnxruntime int8", "openvino int8", "inductor int8")
              if p in calls]
    outs = {p: [] for p in ["fp32 eager"] + models}
    with torch.no_grad():
        for seed in range(n):
            x = random_inputs(name, 10_000 + seed, args.seq_len)
            for p in outs:
                outs[p].append(_numpy(calls[p](*x)))
    ref = outs.pop("fp32 eager")
    res = {}
    for p, ys in outs.items():
        if name in STATIC:
            res[p] = {"top1_vs_fp32": float(np.mean([a.argmax() == b.argmax() for a, b in zip(ys, ref)]))}
            if p != "fxc int8":
                res[p]["top1_vs_fxc_int8"] = float(np.mean([a.argmax() == b.argmax()
                                                            for a, b in zip(ys, outs["fxc int8"])]))
        else:
            cos = [float((a * b).sum(-1).mean()) for a, b in zip(_unit(ys), _unit(ref))]
            res[p] = {"cosine_vs_fp32": float(np.mean(cos))}
        res[p]["inputs"] = n
    return res


def _unit(arrays):
    import numpy as np
    return [a / np.maximum(np.linalg.norm(a, axis=-1, keepdims=True), 1e-12) for a in arrays]


# -- the run ---------------------------------------------------------------------------------------------------------
def run_model(name: str, args) -> dict:
    import numpy as np

    from benchmarks.run import time_interleaved
    with tempfile.TemporaryDirectory() as folder:
        runners, calls, missing, inputs = build_peers(name, args, folder)
    results = {p: {"available": True, "note": r.note} for p, r in runners.items()}
    results.update({p: {"available": False, "reason": why} for p, why in missing.items()})
    outputs = {p: r.to_numpy(r.run()) for p, r in runners.items()}
    time_interleaved(runners, results, args)
    base = outputs.get("fxc int8")
    if base is not None:
        for p, y in outputs.items():
            results[p]["max_abs_vs_fxc_int8"] = float(np.abs(y.reshape(base.shape) - base).max())
    report = {"model": name, "scheme": "static" if name in STATIC else "dynamic", "peers": results}
    try:
        report["accuracy"] = accuracy(name, calls, args)
    except Exception as e:
        from benchmarks.run import _short
        report["accuracy_error"] = _short(e)
    return report


def format_model(rep: dict) -> str:
    peers = rep["peers"]
    fx = peers.get("fxc int8", {})
    lines = [f"{rep['model']} ({rep['scheme']} int8), batch 1:",
             f"  {'peer':26} {'median ms':>10} {'min ms':>8}  {'fxc int8 / peer (median, min)':>30}  "
             f"{'max|y - fxc int8|':>17}  note"]
    for p, r in peers.items():
        if not r.get("available") or "median_ms" not in r:
            lines.append(f"  {p:26} unavailable: {r.get('reason', 'no timing')}")
            continue
        ratio = ""
        if "median_ms" in fx:
            ratio = f"{fx['median_ms'] / r['median_ms']:.2f}x, {fx['min_ms'] / r['min_ms']:.2f}x"
        err = r.get("max_abs_vs_fxc_int8")
        lines.append(f"  {p:26} {r['median_ms']:10.2f} {r['min_ms']:8.2f}  {ratio:>30}  "
                     f"{'' if err is None else f'{err:.3g}':>17}  {r.get('note', '')}")
    fastest = [(r["median_ms"], p) for p, r in peers.items()
               if p in INT8_PEERS and p != "fxc int8" and p != "fxc int8 (torch.compile)" and "median_ms" in r]
    if fastest and "median_ms" in fx:
        t, p = min(fastest)
        lines.append(f"  fxc int8 / fastest int8 peer ({p}): {fx['median_ms'] / t:.2f}x median (goal <= 0.9x)")
    if "median_ms" in fx and "median_ms" in peers.get("fxc fp32", {}):
        lines.append(f"  fxc fp32 / fxc int8: {peers['fxc fp32']['median_ms'] / fx['median_ms']:.2f}x median")
    for p, a in rep.get("accuracy", {}).items():
        lines.append(f"  accuracy {p:22} " + ", ".join(f"{k} {v:.4f}" if isinstance(v, float) else f"{k} {v}"
                                                        for k, v in a.items()))
    if "accuracy_error" in rep:
        lines.append(f"  accuracy: {rep['accuracy_error']}")
    return "\n".join(lines)


def main(argv=None) -> int:
    args = parse_args(argv)
    from benchmarks.run import cpu_name, pin_threads
    pin_threads(args.threads)
    sys.path.insert(0, str(ROOT))
    import torch

    import fxc
    from fxc.runtime.store import atomic_write
    report = {"cpu": cpu_name(), "threads": args.threads, "target": args.target or "llvm (host)",
              "versions": _versions(), "models": []}
    print(f"int8 benchmark on {report['cpu']}, {args.threads} threads, fxc target {report['target']}; "
          f"{report['versions']}", flush=True)
    for name in args.models.split(","):
        rep = run_model(name.strip(), args)
        report["models"].append(rep)
        print(format_model(rep), flush=True)
        torch._dynamo.reset()
    path = Path(args.out) / f"int8-{time.strftime('%Y%m%d-%H%M%S', time.gmtime())}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(path, (json.dumps(report, indent=1) + "\n").encode())
    print(f"wrote {path} (fxc {fxc.__version__})")
    return 0


def _versions() -> str:
    out = []
    for mod in ("torch", "torchao", "onnxruntime", "openvino"):
        try:
            out.append(f"{mod} {__import__(mod).__version__}")
        except Exception as e:
            out.append(f"{mod} unavailable ({type(e).__name__})")
    return ", ".join(out)


if __name__ == "__main__":
    sys.exit(main())
