"""The local engine: ``engine`` (placement, pre-flight, the run), ``transport`` (an agent as a
subprocess, which every engine uses for this machine), ``probe`` (pre-flight as a child process)."""

from launcher.backends.local.engine import create, size

__all__ = ["create", "size"]
