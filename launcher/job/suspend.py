"""Ctrl-Z (SIGTSTP) of tfcluster: its agents are told before it stops.

A stopped coordinator is not a gone one, but an agent reached over SSH or as a Slurm step cannot
see that it is stopped (only a local agent, its child, can: :mod:`worker.agent.coordinator_silence`).
So on SIGTSTP tfcluster first tells every agent that it is about to stop
(:meth:`launcher.job.agents.AgentSet.pause`): until they hear from it again, its silence is a
pause, and only the end of its connection ends their tasks. Then it stops itself, as SIGTSTP's
default action would. At ``fg`` (SIGCONT) it goes on where it was: the next ping ends the pause,
and the job's deadlines move on by the time it was stopped (:mod:`launcher.job.stall`).

The handler only starts a thread: sending takes the agents' locks, which the interrupted main
thread may hold. That thread gives the sending at most :data:`PAUSE_SEND_S`, then stops the
process with SIGSTOP (which, unlike SIGTSTP, no handler catches).
"""

from __future__ import annotations

import os
import signal
import threading
import time
from typing import Protocol

from launcher.job.agents import AgentSet

#: How long the agents may take to be told (a write each; more means a connection is stuck).
PAUSE_SEND_S = 1.0


class Terminal(Protocol):
    """What the person at the terminal sees (:class:`launcher.output.console.Console`)."""

    def before_stop(self) -> None: ...

    def after_stop(self) -> None: ...

    def say(self, text: str) -> None: ...


class Suspender:
    """The SIGTSTP handler of a running job."""

    def __init__(self, agents: AgentSet, terminal: Terminal) -> None:
        self._agents = agents
        self._terminal = terminal
        self._stopping = threading.Lock()

    def __call__(self, signum: int, _frame: object = None) -> None:
        if self._stopping.acquire(blocking=False):  # else a second Ctrl-Z while stopping
            threading.Thread(target=self._stop, name="suspend", daemon=True).start()

    def _stop(self) -> None:
        try:
            telling = threading.Thread(target=self._agents.pause, name="pause", daemon=True)
            telling.start()
            self._terminal.before_stop()
            telling.join(PAUSE_SEND_S)
            stopped = time.monotonic()
            os.kill(os.getpid(), signal.SIGSTOP)
            self._agents.resumed()  # fg: runs again
            self._terminal.after_stop()
            self._terminal.say(f"stopped for {time.monotonic() - stopped:.0f}s (Ctrl-Z); the "
                               "tasks went on, and nothing is counted for it")
        finally:
            self._stopping.release()
