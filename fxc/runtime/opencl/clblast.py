"""CLBlast through ctypes on fxc's own OpenCL context, queue and buffers (no copies at a region's edges).

    lib = clblast()                                     # the loaded libclblast.so.1, or a TargetError naming the fix
    sgemm(queue, call, [(buffer, byte offset) of c, a, b])       # one launch of a "clblast:sgemm" plan step
    sconvgemm(queue, call, [(buffer, byte offset) of y, x, w])   # one "clblast:sconvgemm" (NCHW x OIHW -> NCHW)

`call` is the step's parameters as fxc.backends.external.clblast writes them: (trans_a, trans_b, m, n, k, batch,
a_stride, b_stride) in elements, row-major, C dense (c_stride m*n); batch > 1 runs CLBlastSgemmStridedBatched; a
convolution's: (channels, height, width, kernel_h, kernel_w, pad_h, pad_w, stride_h, stride_w, dilation_h,
dilation_w, kernels, batch), run as CLBlastSconvgemm in cross-correlation mode (what conv2d computes). CLBlast
compiles its kernels on first use per process (its binary cache is in memory only: CLBlastClearCache /
CLBlastFillCache, no API to save it); PoCL's own kernel cache (POCL_KERNEL_CACHE, on by default) keeps the built
programs on disk, which is what makes a second process fast.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import functools

from ...errors import ExecutionError, TargetError

ROW_MAJOR, NO, YES = 101, 111, 112
CROSS_CORRELATION = 151         # CLBlastKernelModeCrossCorrelation
SONAME = "libclblast.so.1"
INSTALL = "install CLBlast: on Debian `apt-get install libclblast1` (or libclblast-dev)"

_S, _M, _F = ctypes.c_size_t, ctypes.c_void_p, ctypes.c_float
_SGEMM = [ctypes.c_int, ctypes.c_int, ctypes.c_int, _S, _S, _S, _F, _M, _S, _S, _M, _S, _S, _F, _M, _S, _S,
          ctypes.POINTER(_M), ctypes.POINTER(_M)]
_BATCHED = [ctypes.c_int, ctypes.c_int, ctypes.c_int, _S, _S, _S, _F, _M, _S, _S, _S, _M, _S, _S, _S, _F, _M, _S, _S,
            _S, _S, ctypes.POINTER(_M), ctypes.POINTER(_M)]
_CONVGEMM = [ctypes.c_int] + [_S] * 13 + [_M, _S, _M, _S, _M, _S, ctypes.POINTER(_M), ctypes.POINTER(_M)]


def check() -> None:
    """TargetError naming the fix when this host cannot load CLBlast."""
    clblast()


@functools.lru_cache(maxsize=None)
def clblast():
    """The CLBlast shared library with the signatures fxc calls; TargetError when it is not installed."""
    for name in (SONAME, ctypes.util.find_library("clblast")):
        if not name:
            continue
        try:
            lib = ctypes.CDLL(name)
        except OSError:
            continue
        lib.CLBlastSgemm.argtypes, lib.CLBlastSgemm.restype = _SGEMM, ctypes.c_int
        lib.CLBlastSgemmStridedBatched.argtypes, lib.CLBlastSgemmStridedBatched.restype = _BATCHED, ctypes.c_int
        lib.CLBlastSconvgemm.argtypes, lib.CLBlastSconvgemm.restype = _CONVGEMM, ctypes.c_int
        return lib
    raise TargetError(f"the target names -libs=clblast but {SONAME} is not installed here; {INSTALL}, or drop "
                      f"-libs=clblast from the target")


def sgemm(queue, call: tuple, operands: list, event: bool = False) -> int | None:
    """Enqueue one GEMM (batched when call's batch > 1) on the pyopencl queue; operands: [(pyopencl buffer, byte
    offset)] of C, A, B. With event, returns the cl_event handle of the call (the caller owns it: a profiled
    module wraps it in a pyopencl Event). ExecutionError with CLBlast's status code when it refuses."""
    ta, tb, m, n, k, batch, sa, sb = call
    (c, oc), (a, oa), (b, ob) = operands
    lda, ldb = (m if ta else k), (k if tb else n)
    q, ev = _M(queue.int_ptr), _M()
    flags = (ROW_MAJOR, YES if ta else NO, YES if tb else NO, m, n, k, 1.0)
    lib = clblast()
    if batch == 1:
        status = lib.CLBlastSgemm(*flags, a.int_ptr, oa // 4, lda, b.int_ptr, ob // 4, ldb, 0.0,
                                  c.int_ptr, oc // 4, n, ctypes.byref(q),
                                  ctypes.byref(ev) if event else None)
    else:
        status = lib.CLBlastSgemmStridedBatched(*flags, a.int_ptr, oa // 4, lda, sa, b.int_ptr, ob // 4, ldb, sb, 0.0,
                                                c.int_ptr, oc // 4, n, m * n, batch, ctypes.byref(q),
                                                ctypes.byref(ev) if event else None)
    if status != 0:
        raise ExecutionError(f"CLBlast refused a GEMM (status {status}, m={m} n={n} k={k} batch={batch}); see "
                             f"clblast_c.h's CLBlastStatusCode, or build without -libs=clblast")
    return ev.value if event else None


def sconvgemm(queue, call: tuple, operands: list, event: bool = False) -> int | None:
    """Enqueue one convolution (CLBlastSconvgemm: NCHW input x OIHW weights -> NCHW result, cross-correlation, zero
    padding) on the pyopencl queue; operands: [(pyopencl buffer, byte offset)] of Y, X, W. With event, returns the
    cl_event handle of the call. ExecutionError with CLBlast's status code when it refuses."""
    (y, oy), (x, ox), (w, ow) = operands
    q, ev = _M(queue.int_ptr), _M()
    status = clblast().CLBlastSconvgemm(CROSS_CORRELATION, *call, x.int_ptr, ox // 4, w.int_ptr, ow // 4,
                                        y.int_ptr, oy // 4, ctypes.byref(q), ctypes.byref(ev) if event else None)
    if status != 0:
        raise ExecutionError(f"CLBlast refused a convolution (status {status}, call {list(call)}); see "
                             f"clblast_c.h's CLBlastStatusCode, or build without -libs=clblast")
    return ev.value if event else None
