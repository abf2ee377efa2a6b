"""The bodies of the `fxc` command line's information commands (fxc/cli.py parses, these do the work): devices.py
(what this host runs), ops.py (what compiles where), explain.py (what a model compiles to)."""
