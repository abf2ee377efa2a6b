"""Measurements as Dask tasks: the tuner's batches fan out over a Dask distributed cluster.

Takes a dask.distributed Client (the user's, `dask=Client(...)`, or one on `--scheduler tcp://host:port`); each batch
is one task submitted with the resource of the device it measures on ({"opencl:<device>": 1}, {"cpu:<machine>": 1}),
so it runs only on a worker that declares that device, one at a time per device (a worker declares 1 of it); a
measurement through a device server ({"device:host:port": 1}) likewise. The
measurement itself still runs in a child process of the worker (fxc/tuning/measure.py), so a crashing candidate
does not take the worker down; a worker that dies anyway loses its task, which is recorded as a "lost" error (the
cluster's distributed.scheduler.allowed-failures, 0 for clusters made here, keeps it from being retried on every
worker). The default, without a client, is in-process: no cluster at all.
"""
from __future__ import annotations

import re

from ..errors import FxcError
from .measure import Result, measure


def resource_of(target, remote: str | None = None) -> str:
    """The Dask resource a measurement on this target needs: its device (or CPU); with `remote`, the device
    server it is measured through."""
    if remote is not None:
        return re.sub(r"\s+", "_", f"device:{remote.removeprefix('tcp://')}")[:120]
    device = str(target.device) if getattr(target, "device", None) is not None else target.mcpu or "host"
    kind = "cpu" if target.is_cpu else target.kind
    return re.sub(r"\s+", "_", f"{kind}:{device}")[:120]


def local_cluster(workers: int, resource: str, threads: int = 1):
    """A LocalCluster of worker processes on 127.0.0.1, each declaring one of `resource` (allowed-failures 0)."""
    import dask  # deferred: optional (fxc[tune])
    from dask.distributed import Client, LocalCluster  # deferred: as above
    dask.config.set({"distributed.scheduler.allowed-failures": 0})
    cluster = LocalCluster(n_workers=workers, threads_per_worker=threads, processes=True, host="127.0.0.1",
                           dashboard_address=None, resources={resource: 1})
    return Client(cluster)


def connect(address: str):
    from dask.distributed import Client  # deferred: optional (fxc[tune])
    return Client(address, timeout=30)


class DaskMeasurer:
    """submit(task, configs, whole_model) -> a future of [Result]; gather(future, configs) -> [Result]."""

    def __init__(self, client, target, target_key: str, params, runner: str, device: str | None = None):
        self.client, self.target, self.tkey, self.params, self.runner = client, target, target_key, params, runner
        self.device = device
        self.resource = resource_of(target, device)
        have = [w for w in client.scheduler_info()["workers"].values() if self.resource in (w.get("resources") or {})]
        if not have:
            raise FxcError(f"no Dask worker declares the resource {self.resource!r}: start the workers of the "
                           f"machine with that device with `dask worker ... --resources \"{self.resource}=1\"`")

    def submit(self, task, configs: list, whole_model=None):
        return self.client.submit(measure, task, str(self.target), self.tkey, configs, self.params, self.runner,
                                  None, self.device, whole_model, resources={self.resource: 1}, pure=False,
                                  retries=0)

    def gather(self, future, configs: list) -> list:
        try:
            return future.result()
        except Exception as e:      # noqa: BLE001 - a lost worker (KilledWorker) or a cancelled task: an error kind
            return [Result(c, error="lost", detail=f"{type(e).__name__}: {e}"[:300]) for c in configs]
