"""Every error fxc raises on purpose derives from FxcError and says what went wrong and how to fix it."""


class FxcError(Exception):
    """Base class of fxc's own errors."""


class UnsupportedOpError(FxcError):
    """An op (or an op with these attributes/dtypes) that fxc cannot compile."""


class ShapeError(FxcError):
    """Shapes or dtypes that do not fit what an op or a compiled module expects."""


class InputError(ShapeError):
    """A compiled callable was given an argument that differs from what it was compiled for."""


class LoweringError(FxcError):
    """A fused group could not be lowered to the loop IR."""


class CompileError(FxcError):
    """A backend failed to build generated code; carries the source and the driver log."""

    def __init__(self, message: str, source: str = "", log: str = ""):
        super().__init__(message + (f"\n--- driver log ---\n{log}" if log else ""))
        self.source, self.log = source, log


class TargetError(FxcError):
    """An unknown target, or a target whose device/runtime is missing here."""


class ArtifactError(FxcError):
    """A deploy artifact that is truncated, corrupt, tampered with or of an unknown format."""


class ModelFileError(FxcError):
    """A model file or its weights (ONNX, MXNet symbol JSON or params) that are missing, truncated, corrupt or that
    contradict themselves."""


class ExecutionError(FxcError, RuntimeError):
    """A compiled call met a condition on which eager PyTorch raises (e.g. integer division by zero)."""


class IndexOutOfRangeError(ExecutionError, IndexError):
    """A compiled index op (embedding, gather, index, index_put, scatter, take...) met an index outside its
    dimension, where eager PyTorch raises IndexError (or RuntimeError): it is both."""


class OutOfMemoryError(FxcError, MemoryError):
    """A call whose outputs, workspace or input copies do not fit in memory (or past the address space), found
    before anything ran: the C entry's FXC_ERR_NO_MEMORY. It is a MemoryError too."""


class DeviceLostError(ExecutionError):
    """The device was lost during a call (a WebGL context lost: a shader the GPU's compiler hung on, the browser
    reclaiming the GPU): the call's outputs are not known (never zeros); the module loads itself again on a fresh
    device at its next call."""


class QuantizationWarning(UserWarning):
    """A quantisation scheme fxc has no integer kernels for (int4, per-group, weight zero points, int16): those ops
    compute in float32 exactly as the model's dequantize -> op defines them, named once per build (docs/int8.md)."""


class LibraryError(FxcError):
    """A compiled shared library that is truncated, damaged or not fxc's (it is never loaded)."""


DIV_BY_ZERO = 2     # bit of a compiled entry's return code: an integer division met a zero divisor
INDEX_OUT_OF_RANGE = 4   # bit of a compiled entry's return code: an index op met an out-of-range index

# the index ops a kernel names by number in its index-error record (fxc_index_error: op, index, size)
INDEX_OPS = ("index", "index_put", "embedding", "gather", "index_select", "scatter")


def index_error_message(op: int, index: int, size: int) -> str:
    name = INDEX_OPS[op] if 0 <= op < len(INDEX_OPS) else "an index op"
    return (f"{name}: index {index} is out of range for a dimension of size {size} (eager PyTorch raises "
            f"IndexError here too); keep the indices in range")


def check_return_code(rc: int, index_error=None) -> None:
    """Raise what a compiled entry's nonzero return code means. index_error: () -> (op, index, size), the
    library's record of the (first) out-of-range index."""
    if rc & INDEX_OUT_OF_RANGE:
        raise IndexOutOfRangeError(index_error_message(*(index_error() if index_error else (-1, "?", "?"))))
    if rc == DIV_BY_ZERO:
        raise ExecutionError("integer division by zero in a compiled kernel (eager PyTorch raises "
                             "ZeroDivisionError here too); make the divisor nonzero or divide in floating point")
    if rc:
        raise ExecutionError(f"a compiled kernel returned error code {rc}")
