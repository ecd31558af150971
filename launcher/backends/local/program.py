"""A program that runs on a host while tfcluster talks to it over its stdin and stdout
(:class:`~launcher.preflight.runner.ProbeProcess`), here as a child process of the coordinator:
on this machine, or through a local command that reaches the host (a scheduler's job step).

Its stderr is read all along by a thread, its last part kept to say why it ended early.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import threading
from collections.abc import Callable, Sequence
from typing import IO, cast

from launcher.preflight.runner import ProbeOutput

#: How much of a program's stderr is kept (its end).
STDERR_KEEP_BYTES = 16 * 1024


class StderrTail:
    """The last :data:`STDERR_KEEP_BYTES` of a stream, read to its end by a thread through
    ``read`` (the next bytes, ``b""`` at the end)."""

    def __init__(self, read: Callable[[], bytes], name: str) -> None:
        self._data = bytearray()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._read, args=(read,), name=name,
                                        daemon=True)
        self._thread.start()

    def _read(self, read: Callable[[], bytes]) -> None:
        with contextlib.suppress(OSError, ValueError):
            while chunk := read():
                with self._lock:
                    self._data += chunk
                    del self._data[:-STDERR_KEEP_BYTES]

    def text(self, wait_s: float = 0.0) -> bytes:
        """What was kept, after waiting up to ``wait_s`` for the stream's end."""
        self._thread.join(wait_s)
        with self._lock:
            return bytes(self._data)


class ChildProgram:
    """``argv`` as a child process with its stdin, stdout and stderr piped (a ``ProbeProcess``);
    raises OSError when it cannot be started."""

    def __init__(self, argv: Sequence[str], cwd: str | None, workdir: str) -> None:
        self.workdir = workdir
        self._proc = subprocess.Popen(list(argv), cwd=cwd, stdin=subprocess.PIPE,
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        # all three are pipes (never None) with PIPE
        self._stdin = cast(IO[bytes], self._proc.stdin)
        self._stdout = cast(IO[bytes], self._proc.stdout)
        self._stderr_pipe = cast(IO[bytes], self._proc.stderr)
        descriptor = self._stderr_pipe.fileno()
        self._stderr = StderrTail(lambda: os.read(descriptor, 4096), f"stderr-{self._proc.pid}")

    def write(self, data: bytes) -> None:
        try:
            self._stdin.write(data)
            self._stdin.flush()
        except ValueError as exc:  # its stdin was closed here
            raise OSError(str(exc)) from exc

    def readline(self) -> bytes:
        try:
            return self._stdout.readline()
        except (OSError, ValueError):
            return b""

    def finish(self, timeout_s: float) -> ProbeOutput:
        with contextlib.suppress(OSError, ValueError):
            self._stdin.close()
        try:
            status = self._proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            status = -1
        return ProbeOutput(status, b"", self._stderr.text(0.5 if status >= 0 else 0.0),
                           self.workdir)

    def close(self) -> None:
        if self._proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                self._proc.kill()
        self._proc.wait()
        self._stderr.text(1.0)
        for stream in (self._stdin, self._stdout, self._stderr_pipe):
            with contextlib.suppress(OSError, ValueError):
                stream.close()
