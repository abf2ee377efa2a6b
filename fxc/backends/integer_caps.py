"""What a device kernel asks of the device's integers, checked against its Caps before it is rendered.

Takes the loop-IR Kernels of one program and the target's Caps; returns nothing, or raises a LoweringError naming
the kernel, the missing capability and the fix. Two capabilities, read from the device by its device API:

- `Caps.int8_storage`: stores of 8-bit elements (int8, uint8, bool) that leave their neighbours alone (OpenCL 1.1
  or cl_khr_byte_addressable_store; GL and WebGPU write the byte into its 32-bit word atomically; WebGL's textures
  hold an int32 an element). A kernel that stores one on a device without it is refused.
- `Caps.int32_ops`: 32-bit two's complement integer arithmetic that wraps (int32 accumulation of int8 products,
  requantization). Every OpenCL, GLSL 4.3 and WGSL device has it; a WebGL page has it when its fragment shaders'
  highp int is 32 bits (getShaderPrecisionFormat). A kernel computing integer values on a device without it is
  refused; its address arithmetic (int64 in the loop IR, in bounds by its contract) is not counted.

A refused group makes the build a LoweringError (torch.compile then runs that graph in eager PyTorch); on webgl and
webgpu it runs as wasm kernels in the same page (fxc.driver.page_kernels) instead.
"""
from __future__ import annotations

from ..errors import LoweringError
from ..lowering.loop_ir import Kernel, Store, stmt_exprs, walk_stmts
from ..symbolic.expr import Bin, scalar_of, walk
from .cstyle import index_exprs

BYTES = ("int8", "uint8", "bool")
INTEGERS = ("int8", "uint8", "int16", "int32")     # value types (int64 is the loop IR's index type)
ARITHMETIC = ("add", "sub", "mul", "shl", "shr", "floordiv", "floormod", "truncdiv", "truncmod", "idiv", "imod")


def byte_stores(kernel: Kernel) -> list:
    """The 8-bit tensors (kernel parameters) the kernel stores to."""
    return sorted({st.buf.name for st in walk_stmts(kernel.body) if isinstance(st, Store)
                   and st.buf.scope in ("global", "scratch") and scalar_of(st.buf.dtype) in BYTES})


def integer_arithmetic(kernel: Kernel) -> list:
    """The integer arithmetic on values (not addresses) the kernel computes, as (op, dtype) pairs."""
    addresses = index_exprs(kernel.body)
    found = set()
    for st in walk_stmts(kernel.body):
        for e in stmt_exprs(st):
            found.update((x.args[0], scalar_of(x.dtype)) for x in walk(e)
                         if isinstance(x, Bin) and x.args[0] in ARITHMETIC and scalar_of(x.dtype) in INTEGERS
                         and x not in addresses)
    return sorted(found)


def check_integer_caps(kernels: list, caps, device: str) -> None:
    """LoweringError for the first kernel that needs an integer capability `caps` (of `device`, e.g. "this WebGL
    page") lacks; caps None: the renderer was called without a target (nothing to check against)."""
    if caps is None:
        return
    for k in kernels:
        stored = byte_stores(k) if not caps.int8_storage else []
        if stored:
            raise LoweringError(f"{k.name}: needs Caps.int8_storage (it stores 8-bit elements: "
                                f"{', '.join(stored[:3])}), which {device} lacks (single-byte stores: OpenCL 1.1 or "
                                f"cl_khr_byte_addressable_store); choose another device or target, or run the model "
                                f"in float32")
        ops = integer_arithmetic(k) if not caps.int32_ops else []
        if ops:
            raise LoweringError(f"{k.name}: needs Caps.int32_ops (it computes {ops[0][1]} {ops[0][0]} on values), "
                                f"which {device} lacks (wrapping 32-bit integers: a WebGL page's highp int is "
                                f"narrower); choose another target (wasm, opencl) or run the model in float32")
