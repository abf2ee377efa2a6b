"""`fxc tune`: the command line of fxc.tune, and the merge and distillation of tuning logs.

    fxc tune model.onnx --target opencl --trials 500 --log tune.jsonl --plot curve.png
    fxc tune models.py:resnet18 --input-shape 1,3,224,224 --trials 200 --scheduler tcp://10.0.0.5:8786
    fxc tune models.py:resnet18 --input-shape 1,3,224,224 --target rasp4b64 --device tcp://raspberrypi:9190
    fxc tune --log a.jsonl --log b.jsonl --distil best.jsonl      # merge logs, keep the best record per workload
"""
from __future__ import annotations

import numpy as np

from ..errors import FxcError
from .log import default_log_path, distil


def add_parser(sub, shape) -> None:
    t = sub.add_parser("tune", help="tune a model's schedules on this machine's device (docs/tuning.md); or merge "
                                    "tuning logs (--distil)")
    t.add_argument("model", nargs="?", help="model.py:factory, package.module:factory or model.onnx")
    t.add_argument("--input-shape", type=shape, action="append", help="e.g. 1,3,224,224; once per input")
    t.add_argument("--target", default="llvm")
    t.add_argument("--trials", type=int, default=200)
    t.add_argument("--log", action="append", help=f"tuning log (default {default_log_path()}); with --distil, "
                                                  f"once per log to merge")
    t.add_argument("--distil", metavar="OUT", help="merge the --log files into OUT, the best record per workload")
    t.add_argument("--scheduler", help="a Dask scheduler, tcp://host:port (default: measure here, no cluster)")
    t.add_argument("--device", help="measure on an fxc device server, tcp://host:port (`fxc serve-device` on the "
                                    "board; --target names the board, e.g. rasp4b64)")
    t.add_argument("--no-confirm", action="store_true", help="skip re-measuring the tuned groups inside the whole "
                                                               "model (kept only where it is not slower)")
    t.add_argument("--plot", help="write the tuning curves to this PNG")
    t.add_argument("--batch", type=int, default=4, help="candidates measured per round")


def run(args, load_factory) -> int:
    """The body of `fxc tune` (load_factory: the CLI's loader of model.py:factory references)."""
    if args.distil:
        if not args.log:
            raise FxcError("fxc tune --distil OUT needs the logs to merge: --log a.jsonl --log b.jsonl")
        n, kept = distil(args.log, args.distil)
        print(f"read {n} records from {len(args.log)} log(s); wrote {kept} (the best per workload and target) to "
              f"{args.distil}")
        return 0
    if not args.model:
        raise FxcError("fxc tune MODEL: name the model (model.onnx, or model.py:factory with --input-shape)")
    from .tuner import tune  # deferred: the tuner loads the compiler, which --distil does not need
    if len(args.log or []) > 1:
        raise FxcError("fxc tune MODEL takes one --log (the log to append to); merge logs with --distil")
    if args.model.endswith(".onnx"):
        model, inputs = args.model, [np.zeros(s, np.float32) for s in args.input_shape or []] or None
    else:
        import torch  # deferred: `fxc tune --distil` and ONNX models load no torch
        if not args.input_shape:
            raise FxcError("give --input-shape once per input of the model (e.g. --input-shape 1,3,224,224)")
        model = load_factory(args.model)().eval()
        inputs = tuple(torch.randn(*s) for s in args.input_shape)
    result = tune(model, inputs, target=args.target, trials=args.trials, log=(args.log or [None])[0],
                  dask=args.scheduler, batch=args.batch, plot=args.plot, device=args.device,
                  confirm=not args.no_confirm)
    print(result)
    return 0
