"""The SSH engine: ``engine`` (the local engine with remote hosts reached over SSH), ``agent`` (an
agent at the far end of one SSH connection per host), ``probe`` (pre-flight over the same
connections, the checkpoint directory over SFTP)."""

from launcher.backends.ssh.engine import create, size

__all__ = ["create", "size"]
