"""`tvm` itself: the devices, `IRModule`, and the submodules (`tvm.relay`, `tvm.nd`, `tvm.target`, `tvm.transform`,
`tvm.runtime`, `tvm.contrib`, `tvm.autotvm`, `tvm.te`, `tvm.testing`) on first use, as after `import tvm`."""
from __future__ import annotations

from ...version import __version__ as _fxc_version
from .finder import module_getattr
from .ir import IRModule  # noqa: F401  (tvm.IRModule)
from .ndarray import cl, cpu, cuda, device, gpu, opencl, opengl, webgpu  # noqa: F401  (tvm's devices)

__version__ = f"0.14.0+fxc{_fxc_version}"       # the Relay era it stands for, and the fxc that runs it
context = device                                 # tvm.context, the name before TVM 0.8
__getattr__ = module_getattr("tvm", {"micro": "fxc has no microTVM", "rpc": "fxc runs on this machine's devices "
                                     "and in its browser targets (webgl, webgpu, wasm); it has no RPC tracker",
                                     "module": "tvm.module.load (before TVM 0.7) is tvm.runtime.load_module"})
