"""TVM MetaSchedule beside fxc.tune, the same trial budget on the same host: one ResNet-18 conv workload and the model.

apache-tvm (requirements-bench.txt) pins a numpy and needs no torch here, so it lives in a venv of its own and
reads the model as ONNX, which fxc's venv writes:

    .venv/bin/python -m benchmarks.tune_tvm export --model resnet18 --out /tmp/resnet18.onnx
    python3 -m venv /work/venv-tvm && /work/venv-tvm/bin/pip install apache-tvm==0.27.0.post1 numpy==1.26.4 onnx \
        psutil cloudpickle xgboost-cpu==3.2.0 apache-tvm-ffi==0.1.14.post1  # (MetaSchedule needs psutil, cloudpickle
                                          # and xgboost, its cost model; with apache-tvm-ffi 0.1.15.post2 it segfaults)
    /work/venv-tvm/bin/python -m benchmarks.tune_tvm conv --onnx /tmp/resnet18.onnx --trials 64
    /work/venv-tvm/bin/python -m benchmarks.tune_tvm model --onnx /tmp/resnet18.onnx --trials 500 [--work DIR]
    /work/venv-tvm/bin/python -m benchmarks.tune_tvm model --onnx /tmp/resnet18.onnx --trials 0 --work DIR

`conv` tunes the fused conv task of the largest weight (how often the model runs it; ties: the first extracted —
with Relax 0.27's fusion that is layer4's 3x3 conv, 512 channels at 7x7, with its residual add and ReLU) with
tune_tir and prints its best latency; `model` tunes every task with tune_relax (max_trials_global = --trials),
compiles with the records and prints the model's latency (median and minimum of --runs calls) beside the untuned
build's; both print the tuning's wall time. The target is this CPU (`llvm -mcpu=<host> -num-cores <cores>`).
"""
import argparse
import os
import statistics
import tempfile
import time


def _export(args) -> None:
    import torch

    from fxc.testing.models import example_inputs, make_model
    torch.manual_seed(0)
    model = make_model(args.model).eval()
    torch.onnx.export(model, example_inputs(args.model), args.out, input_names=["x"], dynamo=False)
    print(f"wrote {args.out}")


def _target():
    import tvm
    cpu = tvm.target.codegen.llvm_get_system_cpu()
    return tvm.target.Target({"kind": "llvm", "mcpu": cpu, "num-cores": os.cpu_count()})


def _relax(path):
    import onnx
    import tvm
    from tvm import relax
    from tvm.relax.frontend.onnx import from_onnx
    mod = from_onnx(onnx.load(path))            # (the weights as constants: the model takes x only)
    passes = [relax.transform.DecomposeOpsForInference(), relax.transform.LegalizeOps(),
              relax.transform.AnnotateTIROpPattern(), relax.transform.FoldConstant(), relax.transform.FuseOps(),
              relax.transform.FuseTIR()]       # (Relax's fusion: MetaSchedule's tasks are fused groups, as fxc's)
    return tvm.ir.transform.Sequential(passes)(mod)


def _conv(args) -> None:
    from tvm.s_tir import meta_schedule as ms
    target = _target()
    mod = _relax(args.onnx)
    tasks = ms.relax_integration.extract_tasks(mod, target)
    names = [t.task_name for t in tasks]
    task = max((t for t in tasks if "conv2d" in t.task_name), key=lambda t: t.weight)
    print(f"{len(tasks)} tasks; tuning {task.task_name} (of {names[:6]}...) with {args.trials} trials on {target}")
    with tempfile.TemporaryDirectory() as work:
        t0 = time.perf_counter()
        db = ms.tune_tir(task.dispatched[0], target, work, max_trials_global=args.trials,
                         num_trials_per_iter=min(64, args.trials))
        wall = time.perf_counter() - t0
        costs = sorted(float(sum(r.run_secs) / len(r.run_secs)) for r in db.get_all_tuning_records() if r.run_secs)
    print(f"MetaSchedule conv {task.task_name}: {len(costs)} measured in {wall:.0f} s; best {costs[0] * 1e3:.3f} ms")


def _model(args) -> None:
    import numpy as np
    import tvm
    from tvm import relax
    from tvm.s_tir import meta_schedule as ms
    target = _target()
    mod = _relax(args.onnx)
    x = np.random.default_rng(0).standard_normal((1, 3, 224, 224)).astype("float32")
    dev = tvm.cpu()

    def timed(ex):
        vm = relax.VirtualMachine(ex, dev)
        inputs = [tvm.runtime.tensor(x, dev)]
        vm["main"](*inputs)
        ts = []
        for _ in range(args.runs):
            t0 = time.perf_counter()
            vm["main"](*inputs)
            ts.append(time.perf_counter() - t0)
        return statistics.median(ts), min(ts)

    with tempfile.TemporaryDirectory() as scratch:
        work = args.work or scratch
        t0 = time.perf_counter()
        if args.trials:
            db = ms.relax_integration.tune_relax(mod, {}, target, work, max_trials_global=args.trials)
        else:       # time the records of an earlier run (--work): tune on a busy host, time on a quiet one
            db = ms.database.JSONDatabase(os.path.join(work, "database_workload.json"),
                                          os.path.join(work, "database_tuning_record.json"), allow_missing=False)
        wall = time.perf_counter() - t0
        tuned = ms.relax_integration.compile_relax(db, mod, target, params=None)
    with target:
        plain = tvm.compile(mod, target=target)
    for name, ex in (("default", plain), ("tuned", tuned)):
        med, lo = timed(ex)
        print(f"TVM MetaSchedule resnet18 {name:<8} median {med * 1e3:8.3f} ms  min {lo * 1e3:8.3f} ms")
    print(f"MetaSchedule tuning: {args.trials} trials in {wall:.0f} s")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    e = sub.add_parser("export")
    e.add_argument("--model", default="resnet18")
    e.add_argument("--out", required=True)
    e.set_defaults(fn=_export)
    for name, fn in (("conv", _conv), ("model", _model)):
        p = sub.add_parser(name)
        p.add_argument("--onnx", required=True)
        p.add_argument("--trials", type=int, default=64)
        p.add_argument("--runs", type=int, default=30)
        p.add_argument("--work", default=None, help="keep MetaSchedule's database here (model: --trials 0 times it)")
        p.set_defaults(fn=fn)
    args = ap.parse_args(argv)
    args.fn(args)


if __name__ == "__main__":
    main()
