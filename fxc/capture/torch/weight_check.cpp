// fxc's per-call weight check for the torch.compile backend (fxc/capture/torch/weights.py, WeightCheck).
//
// Takes a call's argument tuple and, for each weight, its position, the tensor object it must be, the version and
// the data address it had when its prepared forms were made; returns 1 when every weight is that tensor at that
// version and address, 0 when one is not, -1 when it cannot tell (not a tuple, too short, or PyTorch raised: the
// caller checks in Python then). One pass in C over the tensors: their PyTorch objects' fields are read without a
// Python attribute lookup per weight, and the loads of consecutive weights overlap. Built against the installed
// torch's headers (its ABI), with the GIL held (loaded through ctypes.PyDLL).
#include <Python.h>
#include <torch/csrc/autograd/python_variable.h>

extern "C" int fxc_weights_same(PyObject* args, long n, const long long* positions, PyObject* const* tensors,
                                const long long* versions, void* const* addresses) {
  if (!PyTuple_CheckExact(args)) return -1;
  const Py_ssize_t size = PyTuple_GET_SIZE(args);
  for (long i = 0; i < n; ++i) {       // identity first: only then are the objects known to be tensors
    if (positions[i] < 0 || positions[i] >= size) return -1;
    if (PyTuple_GET_ITEM(args, positions[i]) != tensors[i]) return 0;
  }
  try {
    for (long i = 0; i < n; ++i) {
      c10::TensorImpl* impl = THPVariable_Unpack(tensors[i]).unsafeGetTensorImpl();
      if (static_cast<long long>(impl->version_counter().current_version()) != versions[i]) return 0;
      if (impl->data() != addresses[i]) return 0;
    }
  } catch (...) {                      // an inference tensor (no version), one without storage: Python decides
    return -1;
  }
  return 1;
}
