"""CPU-family schedules: vector register tiles (gemm.py), depthwise (depthwise.py), Winograd (winograd.py) and the
default injective / reduction schedules with the dispatch (default.py)."""
