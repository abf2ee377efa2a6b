"""fxc's version: what artifacts and web packages record (fxc_version), importable without the package's API."""
__version__ = "0.1.0"
