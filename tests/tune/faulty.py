"""A measurement runner for the tests whose candidates fail for real: a config with "fault": "crash" aborts the
child process (SIGABRT), "hang" sleeps past any timeout; the others are measured by fxc's own runner. And a runner
whose whole-model measurements are slower with one workload's tuned config (the confirmation step's test)."""
import os
import time

from fxc.tuning.measure import run_batch as fxc_run_batch


def run_batch(payload: dict) -> list:
    for c in payload["configs"]:
        if c.get("fault") == "crash":
            os.abort()
        if c.get("fault") == "hang":
            time.sleep(3600)
    return fxc_run_batch(payload)


def run_slow_in_model(payload: dict) -> list:
    """fxc's runner, except that a whole-model build applying a record of the workload named by
    FXC_TEST_SLOW_WORKLOAD (the test's environment, which the child inherits) is ten times slower: a config that
    wins alone and loses in the whole model."""
    results = fxc_run_batch(payload)
    slow = os.environ.get("FXC_TEST_SLOW_WORKLOAD")
    for c, r in zip(payload["configs"], results):
        if payload.get("whole_model") and slow in c:
            r["costs"] = [x * 10 for x in r["costs"]]
    return results
