"""Auto-tuning: the schedules' knobs searched on the real device (docs/tuning.md).

- workload.py: a workload's key (a fused group's signature + the target's machine key + threads) and target key;
- log.py: the tuning log (JSON lines, one record per measurement, appended atomically) and the best record per
  workload that compiles apply (`tuning_log=` build option, or the default log beside the compile cache);
- frontends.py: the graph IR of a torch, ONNX or MXNet model;
- tasks.py: a model's distinct workloads (graph-level knobs' nodes, its fused groups) with their search spaces;
- measure.py, child.py: candidates built and timed in a child process (timeout; errors recorded by kind);
- features.py, cost_model.py: loop-IR features and the gradient-boosted cost model trained online;
- search.py: evolutionary search over the cost model's predictions;
- scheduler.py: trials shared among the workloads by expected end-to-end gain;
- tuner.py: `tune(...)` (fxc.tune), the loop that ties them together;
- dask.py: measurements as Dask tasks on a cluster (device resources, allowed failures);
- progress.py, plot.py: the progress bar and the tuning-curve PNG;
- cli.py: `fxc tune`.

This package's __init__ imports nothing: the driver reads workload.py and log.py without loading the tuner.
"""
