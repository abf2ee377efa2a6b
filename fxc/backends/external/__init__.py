"""Bring-your-own-codegen backends: vendor libraries that run whole regions of a graph (Qualcomm CLML on Adreno,
CLBlast on OpenCL, oneDNN on the CPU).

Empty until the BYOC work lands. The seam it plugs into: a partitioning pass in fxc/relay_like (a pattern table per
external codegen, named by the target's `-libs=` / kind) marks regions; each external backend here renders a region
to calls of its library and names its runtime shim under fxc/runtime, the same way a target's backend does
(fxc/backends/backend.py); the driver reaches it through fxc.backends.BACKENDS; unclaimed regions stay with the
target's own codegen.
"""
