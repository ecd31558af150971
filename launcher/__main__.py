"""``python -m launcher`` is ``tfcluster``."""

from launcher.cli import entry

entry()
