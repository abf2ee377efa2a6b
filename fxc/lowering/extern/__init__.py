"""The loop IR of te.extern ops, one module per op family: kernels written as loops (rows, scans, sorts,
factorizations) that the op files in fxc/ops name as their compute."""
