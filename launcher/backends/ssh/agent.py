"""Agents on remote hosts: ``python -m worker.agent`` at the far end of one SSH connection per host.

The agent runs as ``cd WORKDIR && exec PYTHON -c START_CODE -m worker.agent`` (each piece
``shlex.quote``\\ d; no environment on the command line, no ``AcceptEnv``: TF_CONFIG and the spec's
env travel only inside the launch message) and is spoken to exactly as a local agent is, through an
:class:`~launcher.backends.channel.AgentChannel` over the session's stdin / stdout. Its stderr is
copied to the agent log. EOF on its stdin (``close_input``, or the connection dropping because the
coordinator died) makes it kill every task tree and exit, as locally.

:meth:`SshTransport.start` returns only once the agent has said hello and been sent its launch
message; if it cannot get that far it raises an :class:`~launcher.ssh.errors.SshError` saying why
(unreachable, host key, authentication, no python there, workdir missing, ``worker`` not
importable) and none of that agent's events reach the sink.
"""

from __future__ import annotations

import contextlib
import threading
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import IO, cast

import paramiko

from launcher.backends.agent_command import agent_command, agent_workdir, explain_agent_exit, launch_for_agent
from launcher.backends.agent_log import AgentLog
from launcher.backends.base import AgentClosed, AgentEvent, Sink
from launcher.backends.channel import AgentChannel
from launcher.plan.planner import HostPlan
from launcher.ssh.config import SshHost
from launcher.ssh.connect import SshConnection
from launcher.ssh.connector import SshConnector
from launcher.ssh.deadline import Deadline
from launcher.ssh.errors import RemoteCommandError
from worker.wire.protocol import Hello, Launch, Message

#: How long a started agent may take to say hello (python start-up on a busy host).
HELLO_TIMEOUT_S = 30.0
#: When the agent's output ends, how long to wait for its exit status to say why.
_EXIT_STATUS_WAIT_S = 2.0
_STDERR_TAIL = 20


# --- the transport -------------------------------------------------------------------------------


class SshTransport:
    """Starts each remote host's agent over its own SSH connection (see the module docstring);
    ``endpoint`` says how a host is reached (the spec's ``hosts`` entry)."""

    def __init__(self, endpoint: Callable[[str], SshHost], connector: SshConnector | None = None,
                 *, hello_timeout_s: float = HELLO_TIMEOUT_S) -> None:
        self.endpoint = endpoint
        self.connector = connector or SshConnector()
        self.hello_timeout_s = hello_timeout_s

    def start(self, host: HostPlan, launch: Launch, sink: Sink,
              log_path: Path) -> SshAgentHandle:
        log_path.parent.mkdir(parents=True, exist_ok=True)
        log = AgentLog(log_path)
        try:
            target = self.connector.target(self.endpoint(host.name))
            workdir = agent_workdir(host)
            command = agent_command(workdir, host.python)
            log.write(f"tfcluster: ssh {target.describe()} {command}\n".encode())
            connection = self.connector.connect(target)
            key = connection.host_key
            recorded = f" (recorded in {key.recorded_in})" if key.recorded_in else ""
            log.write(f"tfcluster: host key {key.name} {key.key_type} {key.fingerprint}"
                      f"{recorded}\n".encode())
            handle = SshAgentHandle(host.name, connection, log, sink)
            handle.begin(command, launch_for_agent(launch, workdir), self.hello_timeout_s,
                         python=host.python, workdir=workdir)
            return handle
        except BaseException as exc:
            with contextlib.suppress(OSError, ValueError):
                log.write(f"tfcluster: {exc}\n".encode())
            log.close()
            raise


class _Gate:
    """Holds an agent's events until its start has succeeded: a host that fails to start gives
    the coordinator an AgentStartError and nothing else."""

    def __init__(self, sink: Sink, explain: Callable[[AgentClosed], AgentClosed],
                 on_closed: Callable[[], None]) -> None:
        self._sink = sink
        self._explain = explain
        self._on_closed = on_closed
        self._lock = threading.Lock()
        self._held: list[AgentEvent] = []
        self._state = "holding"  # holding -> open | dropped

    def __call__(self, event: AgentEvent) -> None:
        if isinstance(event, AgentClosed):
            event = self._explain(event)
            self._on_closed()
        with self._lock:
            if self._state == "open":
                self._sink(event)
            elif self._state == "holding":
                self._held.append(event)

    def open(self) -> None:
        with self._lock:
            for event in self._held:
                self._sink(event)
            self._held.clear()
            self._state = "open"

    def drop(self) -> None:
        with self._lock:
            self._held.clear()
            self._state = "dropped"


class SshAgentHandle:
    """One remote agent: an exec'd session on the host's connection.

    ``close()`` is safe to call more than once: EOF to the agent, wait for its exit status, then
    close the connection. Remote processes cannot be killed from here, so it returns no pids; an
    agent that outlives the timeout loses its connection, which (stdin EOF, stdout EPIPE) makes it
    kill its tasks and exit by itself.
    """

    def __init__(self, host: str, connection: SshConnection, log: AgentLog, sink: Sink) -> None:
        self.host = host
        self.connection = connection
        self._log = log
        self._log_lock = threading.Lock()
        self._stderr_tail: deque[str] = deque(maxlen=_STDERR_TAIL)
        self._hello = threading.Event()
        self._settled = threading.Event()  # hello, or the agent's output ended
        self._closing = False
        self._closed = False
        self._close_lock = threading.Lock()
        self._gate = _Gate(sink, self._explain_close, on_closed=self._settled.set)
        self._session: paramiko.Channel | None = None
        self._agent: AgentChannel | None = None
        self._stderr_thread: threading.Thread | None = None
        self._workdir = "."

    # --- start ---------------------------------------------------------------------------------

    def begin(self, command: str, launch: Launch, hello_timeout_s: float, *, python: str,
              workdir: str) -> None:
        """Exec the agent, wait for its hello, send ``launch``; on failure clean up and raise."""
        self._workdir = workdir
        try:
            self._session = self.connection.open_session(Deadline(hello_timeout_s))
            self.connection.exec(self._session, command, hello_timeout_s)
            self._stderr_thread = threading.Thread(
                target=self._copy_stderr, args=(self._session.makefile_stderr("rb"),),
                name=f"agent-stderr-{self.host}", daemon=True)
            self._stderr_thread.start()
            # paramiko's channel files are binary file objects without typing.IO's nominal type
            self._agent = AgentChannel(self.host, cast(IO[bytes], self._session.makefile("rb")),
                                       cast(IO[bytes], self._session.makefile_stdin("wb")),
                                       self._gate, on_message=self._on_message)
            self._agent.start()
            self._wait_for_hello(self._session, hello_timeout_s, python, workdir)
            self._agent.send(launch)
            self._gate.open()
        except (paramiko.SSHException, OSError) as exc:
            self._abort()
            raise RemoteCommandError(self.host, f"cannot start the agent: {exc}",
                                     f"starting the agent over SSH failed: {exc}") from exc
        except BaseException:
            self._abort()
            raise

    def _on_message(self, message: Message) -> None:
        if isinstance(message, Hello):
            self._hello.set()
            self._settled.set()

    def _wait_for_hello(self, session: paramiko.Channel, timeout_s: float, python: str,
                        workdir: str) -> None:
        if not self._settled.wait(timeout_s):
            raise RemoteCommandError(self.host, "agent did not start",
                                     f"the agent did not say hello within {timeout_s:.0f}s",
                                     "is the host overloaded, or is PYTHON not Python?")
        if self._agent is not None and self._agent.refused is not None:
            raise self._agent.refused  # another tfcluster version there: never sent a launch
        if not self._hello.is_set():  # its output ended first: it could not start
            if self._stderr_thread is not None:
                self._stderr_thread.join(_EXIT_STATUS_WAIT_S)
            raise explain_agent_exit(self.host, python=python, workdir=workdir,
                                     status=session.exit_status,
                                     stderr_tail=list(self._stderr_tail))

    def _abort(self) -> None:
        self._gate.drop()
        self._shut_connection()

    def _shut_connection(self) -> None:
        """Close the SSH connection and let the reader threads finish."""
        self._closing = True
        self.connection.close()
        if self._agent is not None:
            self._agent.join(_EXIT_STATUS_WAIT_S + 1)
        if self._stderr_thread is not None:
            self._stderr_thread.join(1.0)

    # --- running -------------------------------------------------------------------------------

    def _copy_stderr(self, stream: IO[bytes]) -> None:
        with contextlib.suppress(OSError, ValueError):
            for line in stream:
                self._stderr_tail.append(line.decode("utf-8", "replace").rstrip("\r\n"))
                with self._log_lock:
                    if not self._log.closed:
                        self._log.write(line)

    def _explain_close(self, event: AgentClosed) -> AgentClosed:
        """Say why the agent's output ended: its exit status, or the connection's fate."""
        if self._session is None:
            return event
        self._session.status_event.wait(_EXIT_STATUS_WAIT_S)
        status = self._session.exit_status
        address = self.connection.target.address
        if status >= 0:
            tail = list(self._stderr_tail)
            reason = f"agent on {address} exited with status {status}" + (
                f": {tail[-1]}" if status and tail else "")
        elif self._closing:
            reason = f"tfcluster closed the SSH connection to {address}"
        elif not self.connection.active:
            error = self.connection.transport.get_exception()
            reason = f"SSH connection to {address} lost" + (f": {error}" if error else "")
        else:
            reason = f"the SSH session on {address} closed without an exit status"
        return AgentClosed(event.host, reason, event.at)

    def send(self, message: Message) -> None:
        if self._agent is not None:
            self._agent.send(message)

    def launch(self, message: Launch) -> None:
        self.send(launch_for_agent(message, self._workdir))

    def close_input(self) -> None:
        if self._agent is not None:
            self._agent.close_input()
        if self._session is not None:
            with contextlib.suppress(OSError, EOFError, paramiko.SSHException):
                self._session.shutdown_write()

    def close(self, timeout_s: float) -> list[int]:
        with self._close_lock:
            if self._closed:
                return []
            self._closed = True
        self.close_input()
        exited = self._session is None or self._session.status_event.wait(max(timeout_s, 0.0))
        if self._agent is not None and exited:
            self._agent.join(_EXIT_STATUS_WAIT_S)
        if not exited:
            with self._log_lock, contextlib.suppress(OSError, ValueError):
                self._log.write(f"tfcluster: the agent did not exit within {timeout_s:.1f}s of "
                                f"EOF; closing the connection\n".encode())
        self._shut_connection()
        with self._log_lock:
            self._log.close()
        self._agent = None  # let paramiko's channel files go now, not at interpreter exit
        return []
