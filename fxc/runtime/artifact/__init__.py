"""Deploy artifacts: `load` (loader.py) the single file `fxc.export` writes; read.py reads and verifies it,
device.py loads a device artifact, extract.py writes its parts into a folder, signing.py signs and verifies."""
from .loader import load

__all__ = ["load"]
