"""The ``tfcluster`` command line (also ``python -m launcher``)."""

from launcher.cli.main import entry, main

__all__ = ["entry", "main"]
