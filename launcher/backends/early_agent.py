"""A local agent started before it is needed, so that its interpreter start-up and imports
(~70 ms) overlap the coordinator's own instead of delaying the first task.

``tfcluster run`` and ``local`` start one right after parsing the command line, before
they import the spec model and the job machinery; :class:`~launcher.backends.local.transport.LocalTransport`
takes it for the first local agent it needs. An early agent waits on its stdin for its launch: one
that is never taken (a spec without local tasks, a bad spec) sees EOF when it is discarded, or when
tfcluster exits, and exits at once, having started nothing. The probe of this machine starts
beside it (:mod:`launcher.preflight.early_probe`).

It may be sent the first attempt's launch before anything takes it (:meth:`EarlyAgent.launch`,
see :mod:`launcher.cli.start`); the transport that takes it then checks that this is the
launch it was going to send (:attr:`EarlyAgent.sent`).

Its stderr, the agent's own log, goes to a pipe until the run directory exists; from then on a
thread copies it into ``RUN_DIR/agents/<host>.log``.

:func:`agent_popen` is how every agent process on this machine is started (a local agent, or
the job step a scheduler's engine starts on a node). This module imports nothing of tfcluster
but the environment filter, so that starting the agent costs the command line no time.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import threading
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO

from launcher.backends.agent_log import AgentLog
from launcher.backends.process_exit import wait_exit
from launcher.preflight.early_probe import EarlyProbe
from worker.wire.env import without_own
from worker.wire.module_start import agent_argv

if TYPE_CHECKING:
    from worker.wire.protocol import Launch

#: The agent's environment: the coordinator's, without tfcluster's own variables.
AGENT_ENV_EXTRA = {"PYTHONUNBUFFERED": "1"}


def agent_popen(argv: list[str], stderr: int | BinaryIO) -> subprocess.Popen[bytes]:
    """The agent command ``argv`` (:func:`~worker.wire.module_start.agent_argv`, or an ``srun``
    step running it) in its own session (a Ctrl-C in the terminal reaches only the coordinator),
    its stdin and stdout the protocol's pipes. OSError if it cannot be started."""
    return subprocess.Popen(
        argv,
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=stderr,
        start_new_session=True, env={**without_own(os.environ), **AGENT_ENV_EXTRA},
    )


class EarlyAgent:
    """One local agent process waiting for its launch; safe to discard more than once."""

    def __init__(self, python: str) -> None:
        self.python = python
        #: The launch this agent was sent before it was taken (None: none yet).
        self.sent: Launch | None = None
        self._proc: subprocess.Popen[bytes] | None = None
        with contextlib.suppress(OSError):  # the real start will say what is wrong
            self._proc = agent_popen(agent_argv(python), subprocess.PIPE)
        #: The probe of this machine, started too (the check before a local run takes it).
        self.probe = EarlyProbe(python, os.getcwd())

    def waiting(self, python: str) -> bool:
        """Whether an agent running ``python`` still waits, untaken and not yet launched."""
        proc = self._proc
        return proc is not None and self.sent is None and python == self.python \
            and proc.poll() is None

    def launch(self, message: Launch) -> bool:
        """Send the waiting agent its first launch now (its tasks start); False if it could not
        be sent (the agent is gone: whoever takes it then starts another agent)."""
        proc = self._proc
        if proc is None or proc.stdin is None or self.sent is not None:
            return False
        try:
            proc.stdin.write(message.encode())
            proc.stdin.flush()
        except OSError:
            return False
        self.sent = message
        return True

    def take(self, python: str, log_path: Path) -> subprocess.Popen[bytes] | None:
        """The waiting agent, if it runs ``python`` and is still alive (None otherwise); its
        stderr is from now on appended to ``log_path``."""
        proc, self._proc = self._proc, None
        if proc is None:
            return None
        if python != self.python or proc.poll() is not None or proc.stderr is None:
            end_agent(proc)
            return None
        log = AgentLog(log_path)
        threading.Thread(target=_copy, args=(proc.stderr, log), name="agent-log",
                         daemon=True).start()
        return proc

    def discard(self) -> None:
        """End the waiting agent, if nobody took it (it exits on EOF, having started nothing),
        and the probe."""
        self.probe.discard()
        proc, self._proc = self._proc, None
        if proc is not None:
            end_agent(proc)


def end_agent(proc: subprocess.Popen[bytes]) -> None:
    """Close the agent's pipes (EOF: it ends its tasks and exits) and wait for it, at most 5 s
    before it is killed."""
    for pipe in (proc.stdin, proc.stdout, proc.stderr):
        if pipe is not None:
            with contextlib.suppress(OSError):
                pipe.close()
    if wait_exit(proc, 5.0) is None:
        proc.kill()
        proc.wait()


def _copy(source: BinaryIO, log: AgentLog) -> None:
    with source, log:
        for chunk in iter(lambda: source.read1(65536), b""):  # type: ignore[attr-defined]
            log.write(chunk)
