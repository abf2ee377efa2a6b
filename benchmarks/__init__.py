"""Benchmarks of fxc against its peers; see benchmarks/README.md and `python -m benchmarks.run --help`."""
