"""`python -m fxc.compat.tvm [--replace-real-tvm] script.py [args...]`: run an unchanged Relay-era script on fxc.

The script runs as `__main__` with `sys.argv` = [script.py, args...] and its folder first on `sys.path`, as
`python script.py` would; its `import tvm` reaches the facade (with --replace-real-tvm even where apache-tvm is
installed)."""
from __future__ import annotations

import runpy
import sys
from pathlib import Path

from .finder import enable

USAGE = "usage: python -m fxc.compat.tvm [--replace-real-tvm] script.py [args...]"


def main(argv: list) -> None:
    replace = bool(argv) and argv[0] == "--replace-real-tvm"
    argv = argv[1:] if replace else argv
    if not argv or argv[0] in ("-h", "--help"):
        print(USAGE, file=sys.stderr)
        raise SystemExit(0 if argv else 2)
    script = Path(argv[0])
    if not script.is_file():
        print(f"{USAGE}\nno such script: {script}", file=sys.stderr)
        raise SystemExit(2)
    enable(replace_real=replace)
    sys.argv = [str(script)] + argv[1:]
    sys.path.insert(0, str(script.resolve().parent))
    runpy.run_path(str(script), run_name="__main__")


if __name__ == "__main__":
    main(sys.argv[1:])
