"""A measurement child: `python -m fxc.tuning.child RUNNER IN OUT` runs RUNNER ("module:function") on the payload
its parent wrote into the folder IN (JSON and .npy files, fxc/tuning/payload.py: nothing is unpickled) and writes
the result list to OUT as JSON;
`python -m fxc.tuning.child --serve` does so for each line "RUNNER<tab>IN<tab>OUT" of its stdin, answering
"done<tab>OUT" on stdout. A crash or a hang ends only this process; the parent records it (fxc/tuning/measure.py)."""
from __future__ import annotations

import importlib
import json
import sys
from pathlib import Path

from .payload import read


def run(runner: str, src: str, dst: str) -> None:
    module, name = runner.split(":")
    payload = read(src)
    results = getattr(importlib.import_module(module), name)(payload)
    Path(dst).write_text(json.dumps(results))


def serve() -> None:
    for line in sys.stdin:
        runner, src, dst = line.rstrip("\n").split("\t")
        run(runner, src, dst)
        print(f"done\t{dst}", flush=True)


if __name__ == "__main__":
    serve() if sys.argv[1:] == ["--serve"] else run(*sys.argv[1:])
