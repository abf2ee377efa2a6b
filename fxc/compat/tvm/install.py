"""`import fxc.compat.tvm.install`: the one line a Relay-era script adds at its top; from then on `import tvm` in
this process reaches fxc's facade (an installed apache-tvm still wins: `fxc.compat.tvm.enable(replace_real=True)`
to run on fxc regardless)."""
from .finder import enable

enable()
