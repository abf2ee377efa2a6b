"""A measurement runner for the tests whose candidates fail for real: a config with "fault": "crash" aborts the
child process (SIGABRT), "hang" sleeps past any timeout; the others are measured by fxc's own runner."""
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
