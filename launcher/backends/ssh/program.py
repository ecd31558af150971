"""A program that runs on a remote host while tfcluster talks to it over its stdin and stdout
(:class:`~launcher.preflight.runner.ProbeProcess`): one exec'd session on the host's SSH
connection, started as the agent is (``cd WORKDIR && exec ...``, every word quoted)."""

from __future__ import annotations

import contextlib
import shlex
from collections.abc import Sequence
from typing import IO, cast

import paramiko

from launcher.backends.local.program import StderrTail
from launcher.preflight.runner import ProbeOutput
from launcher.ssh.connect import SshConnection
from launcher.ssh.deadline import Deadline


class SshProgram:
    """``argv`` run in ``workdir`` on ``connection``'s host; raises an SshError when it cannot
    be started within ``timeout_s``. Closing it closes its session (the program sees EOF and
    its output breaks); the connection stays the caller's."""

    def __init__(self, connection: SshConnection, argv: Sequence[str], workdir: str,
                 timeout_s: float) -> None:
        self.workdir = workdir
        command = f"cd {shlex.quote(workdir)} && exec {shlex.join(argv)}"
        self._channel = connection.open_session(Deadline(timeout_s))
        try:
            connection.exec(self._channel, command, timeout_s)
        except BaseException:
            self._channel.close()
            raise
        # paramiko's channel files are binary file objects without typing.IO's nominal type
        self._stdin = cast(IO[bytes], self._channel.makefile_stdin("wb"))
        self._stdout = cast(IO[bytes], self._channel.makefile("rb"))
        channel = self._channel
        self._stderr = StderrTail(lambda: channel.recv_stderr(4096),
                                  f"stderr-{connection.target.name}")

    def write(self, data: bytes) -> None:
        try:
            self._stdin.write(data)
            self._stdin.flush()
        except (paramiko.SSHException, EOFError) as exc:
            raise OSError(str(exc) or type(exc).__name__) from exc

    def readline(self) -> bytes:
        try:
            return self._stdout.readline()
        except (OSError, EOFError, paramiko.SSHException):
            return b""

    def finish(self, timeout_s: float) -> ProbeOutput:
        with contextlib.suppress(OSError, EOFError, paramiko.SSHException):
            self._channel.shutdown_write()
        exited = self._channel.status_event.wait(timeout_s)
        status = self._channel.exit_status if exited else -1
        return ProbeOutput(status, b"", self._stderr.text(0.5 if exited else 0.0),
                           self.workdir)

    def close(self) -> None:
        with contextlib.suppress(OSError, EOFError, paramiko.SSHException):
            self._channel.close()
