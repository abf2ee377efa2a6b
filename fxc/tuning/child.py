"""A measurement child: `python -m fxc.tuning.child RUNNER IN OUT` runs RUNNER ("module:function") on the payload
its parent pickled into IN (the parent's own data, never a user's file) and writes the result list to OUT as JSON.
A crash or a hang ends only this process; the parent records it (fxc/tuning/measure.py)."""
from __future__ import annotations

import importlib
import json
import pickle
import sys
from pathlib import Path


def main(argv: list) -> None:
    runner, src, dst = argv
    module, name = runner.split(":")
    payload = pickle.loads(Path(src).read_bytes())    # written by this process's parent, a moment ago
    results = getattr(importlib.import_module(module), name)(payload)
    Path(dst).write_text(json.dumps(results))


if __name__ == "__main__":
    main(sys.argv[1:])
