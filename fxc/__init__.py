"""fxc: a deep-learning compiler that works inside your framework.

    torch.compile(model, backend="fxc")          # PyTorch, no import needed
    fxc.explain(model)(*args, **kwargs)          # what compiled, what fell back, which kernels
    m = fxc.from_torch(model, example_inputs)    # the whole graph, ahead of time
    m = fxc.from_mxnet(sym, params)              # an MXNet model (import fxc.mxnet for Gluon and optimize_for)
    m = fxc.from_onnx("model.onnx")              # an ONNX model (numpy arrays or torch tensors in and out)
    fxc.export(m, "model.fxc"); fxc.load("model.fxc")   # deploy artifact; the runtime needs no torch
    print(fxc.partition_for(model, example_inputs, "clml"))   # what a build offloads to vendor libraries
"""
from .errors import FxcError  # noqa: F401
from .version import __version__  # noqa: F401


def explain(model, *example_inputs, options: dict | None = None, **option_keywords):
    """Compile `model` with torch.compile(backend="fxc") and report what happened.

    ``fxc.explain(model, options={...})(*args, **kwargs)`` runs the model on any inputs, keyword inputs included
    (torch._dynamo.explain's form); ``fxc.explain(model, *example_inputs, **options)`` runs at once on positional
    inputs, every keyword an fxc option.

    Returns
    -------
    fxc.capture.torch.recorder.Explanation with .compiled_ops, .fallback_ops (collections.Counter of op name ->
    count over all captured graphs), .kernels (one line per fused kernel), .failures (subgraphs that could not
    compile: their ops count as fallen back), .graph_breaks (Dynamo's reasons and lines), .dropped_symbols (dynamic
    sizes built per size, and why) and a readable str(); in the first form, a callable that returns it.
    """
    from .capture.torch.explain import explain as _explain  # deferred: `import fxc` loads no torch
    return _explain(model, *example_inputs, options=options, **option_keywords)


def partition_for(model, example_inputs=None, target: str = "clml", **options):
    """What a build of `model` (a torch.nn.Module with its example inputs, or a graph IR Graph) for `target`
    ("clml", "opencl -libs=clblast") offloads to its external libraries, before building: TVM's
    partition_for_clml(mod, params) as a report (docs/byoc.md); see fxc.driver.partition_for.

    Returns a Partition: .regions (library, matches, CLML's region graph), .left (node -> (op, reason)),
    .offloaded_ops / .left_ops counts, and a readable str()."""
    from .driver.partition_for import partition_for as _partition_for  # deferred: `import fxc` loads no compiler
    return _partition_for(model, example_inputs, target, **options)


def from_torch(model, example_inputs, target: str = "llvm", **options):
    """Compile a whole PyTorch model ahead of time; see fxc.capture.torch.aot.from_torch.

    Returns a CompiledModel: torch tensors (or numpy arrays) in, the same kind out; `fxc.export` writes it.
    """
    from .capture.torch.aot import from_torch as _from_torch  # deferred: `import fxc` loads no torch
    return _from_torch(model, example_inputs, target=target, **options)


def from_mxnet(sym, params=None, shapes=None, dtype="float32", target: str = "llvm", **options):
    """Compile an MXNet model (symbol, JSON, file or checkpoint prefix + params); see
    fxc.capture.mxnet.convert.from_mxnet.

    Returns an MXNetModel: NDArrays (or numpy arrays) in, the same kind out; `fxc.export` writes it.
    """
    from .capture.mxnet.convert import from_mxnet as _from_mxnet  # deferred: `import fxc` loads no compiler
    return _from_mxnet(sym, params, shapes=shapes, dtype=dtype, target=target, **options)


def export(compiled, path, sign_key=None, name=None, version=None):
    """Write a compiled model as one deploy artifact (atomically), signed with the Ed25519 `sign_key` when given,
    naming the model `name` at `version` ("1.4.2") in its manifest; see fxc.deploy.export.export."""
    from .deploy.export import export as _export  # deferred: fxc.load's runtime must not load the writer
    return _export(compiled, path, sign_key=sign_key, name=name, version=version)


def load(path, trusted_keys=None, expected_name=None, min_version=None, expected_sha256=None):
    """Load a deploy artifact with the framework-free runtime; see fxc.runtime.artifact.loader.load.

    Checks every part's sha256 (with trusted_keys, the artifact's Ed25519 signature before anything else; with
    expected_name / min_version, the signed model name and version; with expected_sha256, the file's bytes);
    returns a module callable on numpy arrays.
    """
    from .runtime.artifact.loader import load as _load  # deferred: `import fxc` loads only errors and version
    return _load(path, trusted_keys=trusted_keys, expected_name=expected_name, min_version=min_version,
                 expected_sha256=expected_sha256)


def tune(model, example_inputs=None, target: str = "llvm", trials: int = 64, log=None, **kwargs):
    """Tune `model`'s schedules for `target` with `trials` measurements, appending each to the tuning `log` (default:
    the log beside the compile cache), which later compiles for that target apply by themselves; see
    fxc.tuning.tuner.tune and docs/tuning.md.

    Returns a TuneResult (per-workload best configs, the end-to-end estimate before and after, trials, wall time).
    """
    from .tuning.tuner import tune as _tune  # deferred: `import fxc` loads no compiler
    return _tune(model, example_inputs, target=target, trials=trials, log=log, **kwargs)


def from_onnx(model_or_path, shapes=None, target: str = "llvm", **options):
    """Compile an ONNX model (a ModelProto, its bytes or a .onnx path); see fxc.capture.onnx.from_onnx.

    Returns an OnnxModel: numpy arrays (or torch tensors) in, the same kind out; `fxc.export` writes it.
    """
    from .capture.onnx import from_onnx as _from_onnx  # deferred: `import fxc` loads no onnx
    return _from_onnx(model_or_path, shapes=shapes, target=target, **options)
