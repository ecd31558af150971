"""The per-host agent: ``python -m worker.agent``.

It reads a :class:`~worker.protocol.Launch` from stdin, starts every task of this host in its own
session, and then runs one event loop (a selector, no polling) over:

- the tasks' stdout / stderr / report pipes, relayed as ``output`` / ``progress`` / ``report``;
- ``SIGCHLD`` (through the signal wakeup fd): exits are reaped and reported the moment they happen;
- stdin: ``signal``, ``dump_stacks``, ``terminate`` commands, and EOF, which means the coordinator is
  gone (it died or the SSH connection dropped): every task's whole tree is killed and the agent exits.

Protocol messages go to the agent's *original* stdout; fd 1 is pointed at stderr so that a stray
print can never corrupt the protocol.
"""

from __future__ import annotations

import contextlib
import os
import selectors
import signal
import socket
import sys
import time
from typing import Any

from worker import process_tree
from worker.protocol import (
    AgentError,
    DumpStacks,
    Exited,
    Heartbeat,
    Hello,
    Launch,
    Message,
    Output,
    Ping,
    Progress,
    ProtocolError,
    SignalTasks,
    Started,
    TaskReport,
    TaskUsage,
    Terminate,
    Terminated,
    decode_command,
)
from worker.task_process import REPORT, STDERR, LineBuffer, TaskProcess

#: Grace given to tasks when the coordinator vanished (stdin EOF) without asking for a terminate.
EOF_GRACE_S = 2.0
_SHUTDOWN_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


class Agent:
    def __init__(self, commands_fd: int, events_fd: int) -> None:
        self.commands_fd = commands_fd
        self.events_fd = events_fd
        self.tasks: dict[str, TaskProcess] = {}
        self.by_pid: dict[int, TaskProcess] = {}
        self.by_fd: dict[int, TaskProcess] = {}
        self.selector = selectors.DefaultSelector()
        self.commands = LineBuffer(limit=None)
        self.launch: Launch | None = None
        self.input_closed = False  # stdin EOF: the coordinator is done with us (or gone)
        self.output_broken = False  # nobody reads our messages any more
        self.kill_at: float | None = None  # set while terminating
        self.killed = False
        self.terminated_sent = False
        self.next_heartbeat = 0.0
        self._pending_commands: list[str] = []
        self.last_command_at = time.monotonic()

    # --- output to the coordinator ----------------------------------------------------------

    def emit(self, message: Message) -> None:
        if self.output_broken:
            return
        data = memoryview(message.encode())
        try:
            while data:
                written = os.write(self.events_fd, data)
                data = data[written:]
        except OSError:  # BrokenPipe: nobody is listening any more
            self.output_broken = True
            self._coordinator_lost()

    # --- start-up ---------------------------------------------------------------------------

    def read_launch(self) -> Launch | None:
        """Block until the first line (the launch message); None on EOF before it."""
        while True:
            chunk = os.read(self.commands_fd, 65536)
            if not chunk:
                return None
            lines = self.commands.feed(chunk)
            if lines:
                break
        first, rest = lines[0], lines[1:]
        message = decode_command(first)
        if not isinstance(message, Launch):
            raise ProtocolError(f"expected a launch message first, got {message.TYPE!r}")
        self._pending_commands = rest
        return message

    def start_tasks(self, launch: Launch) -> None:
        for task_launch in launch.tasks:
            task = TaskProcess(task_launch, launch.task_env(task_launch))
            self.tasks[task.task] = task
            try:
                task.start()
            except OSError as exc:
                task.exit_status = 127 << 8
                self.emit(Exited(task=task.task, ts=time.time(), exit_code=127,
                                 error=f"cannot start {task_launch.argv[0]!r}: {exc}"))
                continue
            pid = task.pid or 0
            self.by_pid[pid] = task
            for fd in task.fds:
                self.by_fd[fd] = task
                self.selector.register(fd, selectors.EVENT_READ, "task")
            self.emit(Started(task=task.task, pid=pid, ts=time.time()))

    # --- events -----------------------------------------------------------------------------

    def on_task_fd(self, fd: int) -> None:
        task = self.by_fd.get(fd)
        if task is None:  # closed earlier in this same select() batch (its task was reaped)
            return
        stream, lines, eof = task.read(fd)
        self._relay(task, stream, lines)
        if eof:
            self.selector.unregister(fd)
            del self.by_fd[fd]
            task.close_fd(fd)

    def _relay(self, task: TaskProcess, stream: str, lines: list[str]) -> None:
        for line in lines:
            if stream == REPORT:
                task.handle_report(line, lambda kind, data: self._on_report(task, kind, data))
                continue
            if stream == STDERR:
                task.stderr_tail.append(line)
            self.emit(Output(task=task.task, stream=stream, line=line))

    def _on_report(self, task: TaskProcess, kind: str, data: dict[str, Any]) -> None:
        now = time.time()
        if kind == "progress":
            metrics = data.get("metrics")
            self.emit(Progress(task=task.task, step=int(data.get("step", 0)), ts=now,
                               metrics=metrics if isinstance(metrics, dict) else {}))
        elif kind != "error":  # the traceback travels with the exit message
            self.emit(TaskReport(task=task.task, kind=kind, ts=now, data=data))

    def reap(self) -> None:
        """Collect every exited child: tasks are reported, adopted orphans just vanish."""
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            task = self.by_pid.pop(pid, None)
            if task is not None:
                self._on_exit(task, status)

    def _on_exit(self, task: TaskProcess, status: int) -> None:
        now = time.time()
        task.mark_exited(status)
        for fd in list(task.fds):  # everything it wrote before dying, in order, before the exit
            stream, lines, eof = task.read(fd)
            self._relay(task, stream, lines)
            if eof:
                self.selector.unregister(fd)
                del self.by_fd[fd]
                task.close_fd(fd)
        code = os.waitstatus_to_exitcode(status)
        self.emit(Exited(
            task=task.task,
            ts=now,
            exit_code=code if code >= 0 else None,
            signal=process_tree.signal_name(-code) if code < 0 else None,
            traceback=task.traceback,
            stderr_tail=list(task.stderr_tail),
        ))

    def on_command_input(self) -> None:
        try:
            chunk = os.read(self.commands_fd, 65536)
        except BlockingIOError:
            return
        if not chunk:
            self.selector.unregister(self.commands_fd)
            self._coordinator_lost()
            return
        self.last_command_at = time.monotonic()
        for line in self.commands.feed(chunk):
            self.handle_command(line)

    def handle_command(self, line: str) -> None:
        if not line.strip():
            return
        try:
            command = decode_command(line)
        except ProtocolError as exc:
            self.emit(AgentError(message=f"bad command: {exc}"))
            return
        if isinstance(command, Ping):
            return
        if isinstance(command, Terminate):
            self.begin_terminate(command.grace_period_s)
        elif isinstance(command, SignalTasks):
            self._signal(command)
        elif isinstance(command, DumpStacks):
            from worker.bootstrap import STACK_DUMP_SIGNAL

            for task in self.tasks.values():
                if task.running and task.stack_dumps and task.pid is not None:
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(task.pid, signal.SIGCONT)  # a stopped task cannot dump
                        os.kill(task.pid, STACK_DUMP_SIGNAL)
        else:
            self.emit(AgentError(message=f"unexpected command {command.TYPE!r}"))

    def _signal(self, command: SignalTasks) -> None:
        try:
            sig = process_tree.parse_signal(command.signal)
        except ValueError as exc:
            self.emit(AgentError(message=str(exc)))
            return
        for task in self.tasks.values():
            if command.task in (None, task.task) and task.running and task.pid is not None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(task.pid, sig)

    def on_wakeup(self, sock: socket.socket) -> None:
        try:
            signals = sock.recv(4096)
        except BlockingIOError:
            return
        if any(number in signals for number in _SHUTDOWN_SIGNALS):
            self._coordinator_lost()
        self.reap()

    # --- termination ------------------------------------------------------------------------

    def _coordinator_lost(self) -> None:
        """stdin EOF, a broken output or a shutdown signal: end every task and then exit. A
        terminate already under way keeps its own grace period."""
        self.input_closed = True
        if self.kill_at is None:
            self.begin_terminate(EOF_GRACE_S)

    def begin_terminate(self, grace_s: float) -> None:
        """TERM every task tree now; KILL whatever is left after ``grace_s``."""
        deadline = time.monotonic() + max(grace_s, 0.0)
        if self.kill_at is not None and self.kill_at <= deadline:
            return
        first = self.kill_at is None
        self.kill_at = deadline
        if first:
            process_tree.signal_tree(self._pgids(), signal.SIGTERM)
            process_tree.signal_tree(self._pgids(), signal.SIGCONT)  # stopped ones must see TERM

    def _pgids(self) -> list[int]:
        return [t.pid for t in self.tasks.values() if t.pid is not None]

    def _all_gone(self) -> bool:
        return not self.by_pid and not process_tree.descendants()

    def tick(self) -> None:
        now = time.monotonic()
        silence = self.launch.coordinator_timeout_s if self.launch else None
        if silence is not None and not self.input_closed and now - self.last_command_at > silence:
            sys.stderr.write(f"agent: no word from the coordinator for {silence:g}s; "
                             "stopping every task\n")
            self.selector.unregister(self.commands_fd)
            self._coordinator_lost()
        if self.kill_at is not None:
            if not self.killed and now >= self.kill_at:
                self.killed = True
                process_tree.signal_tree(self._pgids(), signal.SIGKILL)
            if not self.terminated_sent and self._all_gone():
                self.terminated_sent = True
                self.emit(Terminated(ts=time.time()))
        if self.kill_at is None and now >= self.next_heartbeat:
            interval = self.launch.heartbeat_interval_s if self.launch else 1.0
            self.next_heartbeat = now + interval
            self.emit(self._heartbeat())

    def _heartbeat(self) -> Heartbeat:
        usage: dict[str, TaskUsage] = {}
        for task in self.tasks.values():
            sample = task.usage()
            if sample is not None and task.pid is not None:
                usage[task.task] = TaskUsage(pid=task.pid, cpu_percent=sample[0],
                                             rss_bytes=sample[1])
        return Heartbeat(ts=time.time(), tasks=usage)

    def _timeout(self) -> float:
        if self.kill_at is not None:
            return 0.05 if self.killed else max(0.0, min(self.kill_at - time.monotonic(), 0.05))
        wake = self.next_heartbeat
        if self.launch is not None and self.launch.coordinator_timeout_s is not None:
            wake = min(wake, self.last_command_at + self.launch.coordinator_timeout_s)
        return max(0.0, wake - time.monotonic())

    # --- main loop --------------------------------------------------------------------------

    def run(self) -> int:
        wake_r, wake_w = socket.socketpair()
        wake_r.setblocking(False)
        wake_w.setblocking(False)
        signal.set_wakeup_fd(wake_w.fileno(), warn_on_full_buffer=False)
        for sig in (signal.SIGCHLD, *_SHUTDOWN_SIGNALS):
            signal.signal(sig, lambda *_: None)
        process_tree.become_subreaper()
        self.emit(Hello(pid=os.getpid(), hostname=socket.gethostname(),
                        python=sys.version.split()[0], ts=time.time()))
        try:
            launch = self.read_launch()
        except ProtocolError as exc:
            self.emit(AgentError(message=f"bad launch message: {exc}"))
            return 2
        if launch is None:
            return 0
        self.launch = launch
        self.start_tasks(launch)
        for line in self._pending_commands:
            self.handle_command(line)
        os.set_blocking(self.commands_fd, False)
        if not self.input_closed:
            self.selector.register(self.commands_fd, selectors.EVENT_READ, "commands")
        self.selector.register(wake_r, selectors.EVENT_READ, "wakeup")
        self.reap()
        while not (self.input_closed and self._all_gone()):
            for key, _ in self.selector.select(self._timeout()):
                if key.data == "task":
                    self.on_task_fd(int(key.fd))
                elif key.data == "commands":
                    self.on_command_input()
                else:
                    self.on_wakeup(wake_r)
            self.tick()
        for task in self.tasks.values():
            task.close()
        return 0


def main() -> None:
    events_fd = os.dup(1)
    os.dup2(2, 1)  # a stray print must not corrupt the protocol
    sys.exit(Agent(commands_fd=0, events_fd=events_fd).run())


if __name__ == "__main__":
    main()
