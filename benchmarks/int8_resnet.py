"""A whole static-int8 ResNet-18 (ONNX QDQ, per-channel int8 weights, uint8 activations) in fxc against fxc's float32
build of the same model and ONNX Runtime's int8 run of the QDQ file (issue 43's ResNet-18 row).

    .venv/bin/python -m benchmarks.int8_resnet                       # batch 1, 2 threads, 20 runs
    .venv/bin/python -m benchmarks.int8_resnet --threads 1 --runs 30 --json out.json

The model: fxc.testing.models' ResNet-18 (random weights, batch norm randomised), exported with torch.onnx.export,
quantised by onnxruntime.quantization.quantize_static (QDQ, per-channel, calibrated on --calib random inputs). fxc
compiles the QDQ file with fxc.from_onnx (quantize_chains -> qconv2d -> use_int8 -> conv2d_packed_i8) and the float32
ONNX file for its fp32 row. Timed interleaved in one process, min and median: wall clock at --threads, or at
--threads 1 the calling thread's CPU time (every runtime then runs on it; time preempted on a shared host is not
counted); and the
agreement reported: fxc int8 against ONNX Runtime int8 (max |diff| of the logits in output quantisation steps), and
the top-1 of the int8 model against the float32 one's on the same random inputs.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time


def _models(folder: str, calib: int):
    import numpy as np
    import onnx
    import torch
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static

    from fxc.testing.models import randomize_batchnorm, resnet18
    torch.manual_seed(0)
    m = resnet18()
    randomize_batchnorm(m)
    m.eval()
    fp32 = os.path.join(folder, "resnet18.onnx")
    torch.onnx.export(m, (torch.randn(1, 3, 224, 224),), fp32, input_names=["x"], output_names=["y"], dynamo=False,
                      opset_version=17)
    rng = np.random.default_rng(0)

    class Reader(CalibrationDataReader):
        def __init__(self):
            self.batches = iter([{"x": rng.standard_normal((1, 3, 224, 224)).astype(np.float32)}
                                 for _ in range(calib)])

        def get_next(self):
            return next(self.batches, None)
    int8 = os.path.join(folder, "resnet18_int8.onnx")
    quantize_static(fp32, int8, Reader(), quant_format=QuantFormat.QDQ, per_channel=True,
                    activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8)
    onnx.checker.check_model(int8)
    return fp32, int8


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.int8_resnet", description=__doc__.split("\n\n")[0])
    ap.add_argument("--target", default="llvm")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--calib", type=int, default=8)
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    os.environ["FXC_NUM_THREADS"] = str(args.threads)
    import numpy as np
    import onnxruntime as ort

    import fxc
    with tempfile.TemporaryDirectory() as folder:
        fp32_path, int8_path = _models(folder, args.calib)
        q = fxc.from_onnx(int8_path, target=args.target)
        f = fxc.from_onnx(fp32_path, target=args.target)
        opts = ort.SessionOptions()
        opts.intra_op_num_threads = args.threads
        opts.inter_op_num_threads = 1
        sess = ort.InferenceSession(int8_path, opts, providers=["CPUExecutionProvider"])
        x = np.random.default_rng(1).standard_normal((1, 3, 224, 224)).astype(np.float32)
        runs = {"fxc_int8": lambda: q(x), "fxc_fp32": lambda: f(x),
                "onnxruntime_int8": lambda: sess.run(None, {"x": x})}
        for fn in runs.values():
            fn()
        clock = time.thread_time if args.threads == 1 else time.perf_counter
        ts = {k: [] for k in runs}
        for r in range(args.runs):
            for k in (list(runs) if r % 2 == 0 else list(reversed(runs))):
                t = clock()
                runs[k]()
                ts[k].append(clock() - t)
        kernels = q.module.kernels
        xs = np.random.default_rng(2).standard_normal((16, 1, 3, 224, 224)).astype(np.float32)
        top_q = [int(np.argmax(np.asarray(q(v)))) for v in xs]
        top_f = [int(np.argmax(np.asarray(f(v)))) for v in xs]
        diffs = [float(np.abs(np.asarray(q(v)) - sess.run(None, {"x": v})[0]).max()) for v in xs[:4]]
    row = {"target": args.target, "threads": args.threads,
           "int8_kernels": sum("packed_i8" in k for k in kernels), "generic_int_kernels":
           sum(("qconv2d" in k or "qmatmul" in k) for k in kernels),
           "top1_agreement_int8_vs_fp32": sum(a == b for a, b in zip(top_q, top_f)) / len(xs),
           "max_abs_diff_vs_onnxruntime": max(diffs)}
    for k, t in ts.items():
        row[k] = {"min_ms": 1e3 * min(t), "median_ms": 1e3 * statistics.median(t)}
    row["int8_speedup_vs_fp32_min"] = min(ts["fxc_fp32"]) / min(ts["fxc_int8"])
    row["int8_speedup_vs_fp32_median"] = statistics.median(ts["fxc_fp32"]) / statistics.median(ts["fxc_int8"])
    row["vs_onnxruntime_int8_min"] = min(ts["fxc_int8"]) / min(ts["onnxruntime_int8"])
    print(json.dumps(row, indent=1))
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(row, fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
