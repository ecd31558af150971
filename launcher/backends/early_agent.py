"""A local agent started before it is needed, so that its interpreter start-up and imports
(~70 ms) overlap the coordinator's own instead of delaying the first task.

``tfcluster run`` and ``local`` start one right after parsing the command line, before
they import the spec model and the job machinery; :class:`~launcher.backends.local.LocalBackend`
takes it for the first local agent it needs. An early agent waits on its stdin for its launch: one
that is never taken (a spec without local tasks, a bad spec) sees EOF when it is discarded, or when
tfcluster exits, and exits at once, having started nothing.

Its stderr, the agent's own log, goes to a pipe until the run directory exists; from then on a
thread copies it into ``RUN_DIR/agents/<host>.log``.

:func:`agent_popen` is how every agent process on this machine is started (a local agent, or the
``srun`` step of a Slurm node's). This module imports nothing of tfcluster but the environment
filter, so that starting the agent costs the command line no time.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import threading
from pathlib import Path
from typing import BinaryIO

from worker.env import without_own

#: The agent's environment: the coordinator's, without tfcluster's own variables.
AGENT_ENV_EXTRA = {"PYTHONUNBUFFERED": "1"}


def agent_popen(argv: list[str], stderr: int | BinaryIO) -> subprocess.Popen[bytes]:
    """The agent command ``argv`` (``python -m worker.agent``, or an ``srun`` step running it) in
    its own session (a Ctrl-C in the terminal reaches only the coordinator), its stdin and stdout
    the protocol's pipes. OSError if it cannot be started."""
    return subprocess.Popen(
        argv,
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=stderr,
        start_new_session=True, env={**without_own(os.environ), **AGENT_ENV_EXTRA},
    )


class EarlyAgent:
    """One local agent process waiting for its launch; safe to discard more than once."""

    def __init__(self, python: str) -> None:
        self.python = python
        self._proc: subprocess.Popen[bytes] | None = None
        with contextlib.suppress(OSError):  # the real start will say what is wrong
            self._proc = agent_popen([python, "-m", "worker.agent"], subprocess.PIPE)

    def take(self, python: str, log_path: Path) -> subprocess.Popen[bytes] | None:
        """The waiting agent, if it runs ``python`` and is still alive (None otherwise); its
        stderr is from now on appended to ``log_path``."""
        proc, self._proc = self._proc, None
        if proc is None:
            return None
        if python != self.python or proc.poll() is not None or proc.stderr is None:
            _end(proc)
            return None
        log = log_path.open("ab")
        threading.Thread(target=_copy, args=(proc.stderr, log), name="agent-log",
                         daemon=True).start()
        return proc

    def discard(self) -> None:
        """End the waiting agent, if nobody took it (it exits on EOF, having started nothing)."""
        proc, self._proc = self._proc, None
        if proc is not None:
            _end(proc)


def _end(proc: subprocess.Popen[bytes]) -> None:
    for pipe in (proc.stdin, proc.stdout, proc.stderr):
        if pipe is not None:
            with contextlib.suppress(OSError):
                pipe.close()
    try:
        proc.wait(timeout=5.0)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def _copy(source: BinaryIO, log: BinaryIO) -> None:
    with source, log:
        for chunk in iter(lambda: source.read1(65536), b""):  # type: ignore[attr-defined]
            log.write(chunk)
            log.flush()
