"""autotvm over fxc's tuner: tasks, a tuner's trials in the log_to_file log, apply_history_best, and TVM's x86
tuning tutorial run on fxc with the one added line."""
import numpy as np
import pytest

from fxc.compat.tvm import disable, enable
from fxc.compat.tvm.unsupported import UnsupportedAPIError
from tests.compat.models import super_resolution
from tests.compat.test_tutorials import run_script

pytest.importorskip("fxc.tuning.tuner", reason="fxc.tune (the tune branch) is not in this tree yet")


@pytest.fixture(scope="module")
def tvm():
    enable()
    import tvm as facade
    from tvm import autotvm, relay  # noqa: F401
    yield facade
    disable()


def test_tuner_writes_the_log_and_builds_apply_it(tvm, tmp_path):
    from fxc.backends import fill
    from fxc.driver.tuned import tuned_records
    from fxc.tuning.log import read
    autotvm = tvm.autotvm
    model = super_resolution(size=16)
    x = np.random.default_rng(0).uniform(0, 1, (1, 1, 16, 16)).astype(np.float32)
    mod, params = tvm.relay.frontend.from_onnx(model, {"input": x.shape})
    tasks = autotvm.task.extract_from_program(mod["main"], target="llvm", params=params,
                                              ops=(tvm.relay.op.get("nn.conv2d"),))
    assert tasks and all(len(t.config_space) > 1 for t in tasks)
    log = tmp_path / "tuning.log"
    option = autotvm.measure_option(builder=autotvm.LocalBuilder(),
                                    runner=autotvm.LocalRunner(number=1, repeat=2, timeout=60))
    autotvm.tuner.XGBTuner(tasks[0]).tune(n_trial=3, measure_option=option,
                                          callbacks=[autotvm.callback.log_to_file(str(log))])
    records = read(log)
    assert len(records) >= 3 and {r["workload"] for r in records} == {tasks[0].workload}
    assert tasks[0].workload in tuned_records({"tuning_log": str(log)}, fill("llvm"))   # the model's build reads it
    default = tvm.relay.create_executor("graph", mod, tvm.cpu(0), "llvm", params).evaluate()(x).numpy()
    with autotvm.apply_history_best(str(log)):
        lib = tvm.relay.build(mod, "llvm", params=params)
    m = tvm.contrib.graph_executor.GraphModule(lib["default"](tvm.cpu(0)))
    m.run(input=x)
    np.testing.assert_allclose(m.get_output(0).numpy(), default, rtol=1e-4, atol=1e-4)
    with pytest.raises(UnsupportedAPIError, match="ops="):
        autotvm.task.extract_from_program(mod["main"], target="llvm", params=params,
                                          ops=(tvm.relay.op.get("nn.lstm"),))


def test_tutorial_tune_relay_x86(tmp_path):
    from fxc.tuning.log import read
    run_script("tutorial_tune_relay_x86", tmp_path / "resnet-18.log", tmp_path / "out.npz", tmp_path=tmp_path)
    got = np.load(tmp_path / "out.npz")
    np.testing.assert_allclose(got["tuned"], got["default"], rtol=1e-4, atol=1e-4)
    assert {r["workload"] for r in read(tmp_path / "resnet-18.log")} == set(got["tasks"])
