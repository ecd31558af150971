"""Agents on this machine: ``python -m worker.agent`` as a subprocess, spoken to over its pipes
(the local engine's transport, and every other engine's for its hosts that are this machine).

The agent gets its own session so that a Ctrl-C in the terminal reaches only the coordinator, which
then stops every task in order (TERM, grace period, KILL) instead of racing the signal. The first
one may have been started early, while tfcluster itself was starting
(:mod:`launcher.backends.early_agent`).
"""

from __future__ import annotations

import contextlib
import logging
import os
import subprocess
from pathlib import Path

from launcher.backends.base import Sink
from launcher.backends.channel import AgentChannel
from launcher.backends.early_agent import EarlyAgent, agent_popen, end_agent
from launcher.backends.process_exit import wait_exit
from launcher.errors import AgentStartError
from launcher.plan.planner import HostPlan
from worker.wire.module_start import agent_argv
from worker.wire.protocol import Launch, Message
from worker.wire.safe_open import open_appending_bytes

#: How long to wait for the agent's reader thread to deliver its last messages.
CHANNEL_JOIN_S = 5.0

logger = logging.getLogger(__name__)


class LocalAgentHandle:
    """A local agent. Its tasks die with it (EOF, or PR_SET_PDEATHSIG if it is killed); anything
    they left (children, double-forked grandchildren) is found through the process table the
    agent keeps (:mod:`worker.wire.process_table`), which names only processes provably its own, so a
    stranger that reused a pid is never signalled."""

    def __init__(self, host: str, proc: subprocess.Popen[bytes], channel: AgentChannel,
                 process_table: str | None, process_mark: str | None = None) -> None:
        self.host = host
        self._proc = proc
        self._channel = channel
        self._process_table = process_table
        self._process_mark = process_mark
        self._closed = False

    @property
    def pid(self) -> int:
        return self._proc.pid

    def send(self, message: Message) -> None:
        self._channel.send(message)

    def launch(self, message: Launch) -> None:
        self._channel.send(message)

    def close_input(self) -> None:
        self._channel.close_input()

    def close(self, timeout_s: float) -> list[int]:
        if self._closed:
            return []
        self._closed = True
        self._channel.close_input()
        code = wait_exit(self._proc, timeout_s)
        if code is None:
            self._proc.kill()
            code = self._proc.wait()
        self._channel.join(CHANNEL_JOIN_S)
        return self._kill_leftovers(vouched=code == 0)

    def _kill_leftovers(self, vouched: bool = False) -> list[int]:
        """What the agent left and did not end itself (it was killed, or hung): processes of the
        job it recorded or that carry its mark, never one that does not prove to be the job's.
        ``vouched``: the agent exited 0, which it does only once no process below it is left (a
        subreaper: orphans stay below it); with its table removed, which it does last, there is
        nothing to look for (no scan of every process's environment at the end of each run)."""
        if self._process_table is None:
            return []
        table = os.path.expanduser(self._process_table)  # as the agent names it
        if vouched and not os.path.lexists(table):
            return []
        from worker.wire.process_table import kill_recorded, remove_table

        cleared = kill_recorded(self._process_table, self._process_mark)
        if cleared.problem is not None:
            logger.warning("%s: %s", self.host, cleared.problem)
        if cleared.unproven:
            logger.warning("%s: left alone %d live processes listed in %s that do not carry this "
                           "run's mark", self.host, cleared.unproven, self._process_table)
        with contextlib.suppress(OSError):
            remove_table(self._process_table)
        return cleared.killed


def launched(host: str, proc: subprocess.Popen[bytes], launch: Launch, sink: Sink,
             process_table: str | None, *, sent: bool = False) -> LocalAgentHandle:
    """The handle of agent process ``proc`` (started by :func:`agent_popen`), its reader
    running and ``launch`` sent (unless it was ``sent`` already); ``process_table``: where
    leftovers are found if it dies."""
    if proc.stdin is None or proc.stdout is None:  # cannot happen with PIPE; keeps mypy honest
        raise AgentStartError(host, "agent started without pipes")
    channel = AgentChannel(host, proc.stdout, proc.stdin, sink)
    channel.start()
    if not sent:
        channel.send(launch)
    return LocalAgentHandle(host, proc, channel, process_table, launch.process_mark)


class LocalTransport:
    """Starts local agents; the first one it needs may be an :class:`EarlyAgent` already up."""

    def __init__(self, python: str | None = None, early: EarlyAgent | None = None) -> None:
        self.python = python
        self._early = early

    def start(self, host: HostPlan, launch: Launch, sink: Sink,
              log_path: Path) -> LocalAgentHandle:
        log_path.parent.mkdir(parents=True, exist_ok=True)
        python = self.python or host.python
        sent = None if self._early is None else self._early.sent  # its first launch, if any
        proc = self._early.take(python, log_path) if self._early is not None else None
        if proc is not None and sent is not None and sent != launch:
            end_agent(proc)
            raise AgentStartError(host.name, "the agent started early was sent another launch "
                                  "than this attempt's (a tfcluster bug: please report it)")
        if proc is None:
            sent = None
            with open_appending_bytes(log_path) as log:
                try:
                    proc = agent_popen(agent_argv(python), log)
                except OSError as exc:
                    raise AgentStartError(host.name, f"cannot start {python!r}: {exc}",
                                          "check the spec's 'python' field") from exc
        return launched(host.name, proc, launch, sink, launch.process_table,
                        sent=sent is not None)

    def discard_early(self) -> None:
        """End the early agent if no local agent took it (safe to call more than once)."""
        if self._early is not None:
            self._early.discard()
