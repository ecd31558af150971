"""The per-host agent: ``python -m worker.agent``. One agent lives for the whole job.

It says hello and reads a :class:`~worker.wire.protocol.Launch` from stdin (one from another
tfcluster version is refused before anything starts: :mod:`worker.agent.greeting`), kills whatever
a dead predecessor left in the launch's process table (:mod:`worker.wire.process_table`), starts
every task of this host in its own session (when, :mod:`worker.agent.task_starts` decides: from a
warm spare, :mod:`worker.agent.spares.warm_starts`, or a few cold starts at a time), then one event
loop (a selector, no polling) over:

- the tasks' stdout / stderr / report pipes: one bounded read per pipe and turn, relayed as
  ``output`` / ``progress`` / ``report`` within each stream's budget (:mod:`worker.agent.task_process`);
- ``SIGCHLD`` (through the signal wakeup fd): exits are reaped and reported the moment they happen;
- stdin: the coordinator's commands (``ping`` / ``pause``: :mod:`worker.agent.coordinator_silence`;
  ``dump_stacks``: :mod:`worker.agent.stack_dumps`), and EOF, which means the coordinator is gone
  (it died or the SSH connection dropped): every task's whole tree is killed
  (:mod:`worker.agent.teardown`) and the agent exits;
- between attempts, the next ``launch``: an attempt ends with a ``terminate``, which the agent
  confirms with ``terminated`` once every task tree is gone; the coordinator sends the next launch
  only after that, so every message of one attempt comes before any of the next;
- stdout, while the :class:`~worker.agent.outbox.Outbox` holds messages the coordinator has not taken.

Nothing holds the loop up (a task flooding its output, a coordinator that stops reading), nothing
a task writes can raise out of it, only processes provably this agent's are ever signalled
(:mod:`worker.agent.process_tree`).
"""

from __future__ import annotations

import os
import selectors
import signal
import socket
import time
from collections.abc import Callable

from worker.agent import host_memory, process_tree, reaping
from worker.agent.command_input import CommandInput
from worker.agent.coordinator_silence import CoordinatorSilence
from worker.agent.greeting import greet
from worker.agent.notes import note
from worker.agent.oom_evidence import MemoryEvidence, OomWatch
from worker.agent.outbox import Outbox
from worker.agent.single_tasks import SingleStops
from worker.agent.spares.pool import SELECTOR_DATA
from worker.agent.spares.warm_starts import WarmStarts
from worker.agent.stack_dumps import StackDumps
from worker.agent.task_process import MAX_AGENT_ERROR_CHARS, SpawnError, TaskProcess
from worker.agent.task_signals import tell_tasks
from worker.agent.task_starts import TaskStarts
from worker.agent.teardown import Teardown
from worker.wire import process_table
from worker.wire.protocol import (
    AgentError,
    DumpStacks,
    Exited,
    FillSpares,
    Heartbeat,
    Launch,
    Message,
    Pause,
    Ping,
    Progress,
    ProtocolError,
    SignalTasks,
    Started,
    StartTask,
    StopAt,
    StopTask,
    TaskLaunch,
    Terminate,
    Terminated,
    decode_command,
)

#: Grace given to tasks when the coordinator vanished (stdin EOF) without asking for a terminate.
EOF_GRACE_S = 2.0
#: How long an exiting agent waits for the coordinator to take its last messages.
EXIT_FLUSH_S = 5.0
_SHUTDOWN_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
_Read = Callable[[], tuple[list[Message], list[int]]]


class Agent:
    """One agent's state and loop; :meth:`run` is all of its life."""

    def __init__(self, commands_fd: int, events_fd: int) -> None:
        self.commands_fd = commands_fd
        self.commands = CommandInput(commands_fd)
        self.outbox = Outbox(events_fd)
        self.tasks: dict[str, TaskProcess] = {}
        self.by_pid: dict[int, TaskProcess] = {}
        self.by_fd: dict[int, TaskProcess] = {}
        self.dropping: dict[str, TaskProcess] = {}  # tasks with dropped lines yet to be told
        self.selector = selectors.DefaultSelector()
        self.launch: Launch | None = None
        self.table: process_table.TableKeeper | None = None  # named by the first launch
        self.input_closed = False  # stdin EOF: the coordinator is done with us (or gone)
        self.output_broken = self._watching_output = False  # nobody reads us; stdout watched
        self.warm = WarmStarts(self.selector)
        self.starts = TaskStarts(self.warm)
        self.teardown = Teardown(self.tasks, kept=self.warm.pool.pids)
        self.stops = SingleStops()  # tasks stopped alone (StopTask)
        self.oom = OomWatch()
        self.dumps = StackDumps()  # asked for before a hung attempt is killed
        self.next_heartbeat = self.next_record = 0.0
        self.silence = CoordinatorSilence(time.monotonic(), note)

    def start_tasks(self, launch: Launch) -> None:
        pending = [(TaskProcess(t, launch.task_env(t)), t) for t in launch.tasks]
        self.tasks.update((task.task, task) for task, _ in pending)
        self.starts.attempt(launch, pending)
        self.start_due(first=True)

    def start_due(self, first: bool = False) -> None:
        """Start the tasks due now (:mod:`worker.agent.task_starts`); the process table is rewritten
        after the first ones and once all have started (each record reads all of ``/proc``)."""
        now, any_started = time.monotonic(), False
        while due := self.starts.due(now):
            for pending in due:
                self.start_task(*pending)
            any_started = True
        if first or (any_started and not self.starts.waiting):
            self.record()

    def start_task(self, task: TaskProcess, launch: Launch, task_launch: TaskLaunch) -> None:
        try:
            warm, cold_reason = self.warm.start(task, launch, task_launch)
        except SpawnError as exc:
            task.exit_status = 127 << 8
            self.starts.started(task, warm=False)
            self.outbox.put(Exited(task=task.task, ts=time.time(), exit_code=127, error=str(exc)))
            return
        self.starts.started(task, warm)
        pid = task.pid or 0
        self.oom.sample([pid])
        self.by_pid[pid] = task
        for fd in task.fds:
            self.by_fd[fd] = task
            self.selector.register(fd, selectors.EVENT_READ, "task")
        self.outbox.put(Started(task=task.task, pid=pid, ts=time.time(), warm=warm,
                                cold_reason=cold_reason))

    def next_attempt(self, launch: Launch) -> None:
        """Start the tasks of the next attempt, once the last one's teardown is confirmed."""
        if self.tasks and not self.teardown.all_gone:
            self.outbox.put(AgentError(message=f"launch of attempt {launch.attempt} refused: "
                                       "the last attempt's tasks still run (terminate them)"))
            return
        for task in self.tasks.values():
            self._forget(task)
        self.tasks.clear()  # in place: the teardown holds this dict
        self.dropping.clear()
        self.by_pid.clear()
        self.teardown = Teardown(self.tasks, kept=self.warm.pool.pids)
        self.outbox.new_attempt()
        self.launch = launch
        self.start_tasks(launch)

    def _forget(self, task: TaskProcess) -> None:
        """Stop watching the pipes of ``task``, which has exited (its attempt is over, or anew)."""
        for fd in list(task.fds):
            if self.by_fd.pop(fd, None) is not None:
                self.selector.unregister(fd)
        task.close()
        self.dropping.pop(task.task, None)

    def restart_task(self, task_launch: TaskLaunch) -> None:
        """Start one task of this attempt again, alone (:class:`StartTask`)."""
        old = self.tasks.get(task_launch.task)
        if self.launch is None or self.teardown.started or old is None or old.running:
            why = "not a task of this attempt" if old is None else \
                "it still runs" if old.running else "the attempt is being torn down"
            self.outbox.put(AgentError(message=f"{task_launch.task}: not started again: {why}"))
            return
        self._forget(old)
        task = TaskProcess(task_launch, self.launch.task_env(task_launch))
        self.tasks[task.task] = task
        self.outbox.new_attempt(task.task)
        self.starts.one(task, self.launch, task_launch)
        self.start_due()

    def record(self) -> None:
        """Rewrite the process table (if the launch named one) with every process we own now."""
        if self.table is not None:
            self.table.record(process_tree.own_descendants())  # the spares too

    # --- events -----------------------------------------------------------------------------

    def relay(self, task: TaskProcess, read: _Read) -> None:
        """Queue what ``read`` turned the task's bytes into, and close the pipes it ended."""
        try:
            messages, ended = read()
        except Exception as exc:  # a bug here must not cost the host its other tasks
            text = f"{task.task}: stopped reading its output: {exc!r}"
            messages, ended = [AgentError(message=text[:MAX_AGENT_ERROR_CHARS])], list(task.fds)
        self.starts.settled(task.task)  # it wrote something, or exited
        for message in messages:
            self.outbox.put(message)
            if isinstance(message, Progress):
                self.warm.first_step()
        if task.notice_due_at() is not None:
            self.dropping[task.task] = task
        for fd in ended:
            self.selector.unregister(fd)
            del self.by_fd[fd]
            task.close_fd(fd)

    def on_task_fd(self, fd: int) -> None:
        task = self.by_fd.get(fd)
        if task is not None:  # else closed earlier in this same select() batch (its task exited)
            self.relay(task, lambda: task.read(fd))

    def reap(self) -> None:
        """Collect every exited child: tasks are reported (a SIGKILL's cause read first), orphans vanish."""
        while (exit_ := reaping.next_exit()) is not None:
            task = self.by_pid.pop(exit_[0], None)
            memory = None if task is None else self.oom.evidence(*exit_)
            if (reaped := reaping.reap(exit_[0])) is not None and task is not None:
                self._on_exit(task, *reaped, memory)
            elif reaped is not None:
                self.warm.pool.reaped(exit_[0], reaped[0])

    def _on_exit(self, task: TaskProcess, status: int, peak_rss: int | None,
                 memory: MemoryEvidence | None) -> None:
        reaped_at = time.time()
        task.mark_exited(status)
        self.relay(task, task.drain)  # everything it wrote before dying, before the exit
        for notice in task.notices(time.monotonic(), force=True):
            self.outbox.put(notice)
        self.outbox.put(task.exited(status, reaped_at, peak_rss, memory))
        self.teardown.poke()  # the last one may have gone: look now, not at the next poll

    def on_command_input(self) -> None:
        lines = self.commands.read()
        if lines is None:
            self.selector.unregister(self.commands_fd)
            self._coordinator_lost()
            return
        self.silence.heard(time.monotonic())
        for line in lines:
            self.handle_command(line)

    def handle_command(self, line: bytes) -> None:
        if not line.strip():
            return
        try:
            command = decode_command(line)
        except ProtocolError as exc:
            self.outbox.put(AgentError(message=f"bad command: {exc}"[:MAX_AGENT_ERROR_CHARS]))
            return
        if isinstance(command, Ping | Pause):
            self.silence.heard(time.monotonic(), paused=isinstance(command, Pause))
            return
        if isinstance(command, Terminate):
            self.starts.drop()
            self.teardown.begin(command.grace_period_s, time.monotonic())
        elif isinstance(command, Launch):
            self.next_attempt(command)
        elif isinstance(command, StopTask):
            if (stopping := self.tasks.get(command.task)) is not None:
                self.stops.begin(stopping, command.grace_period_s, time.monotonic())
        elif isinstance(command, StartTask):
            self.restart_task(command.task)
        elif isinstance(command, FillSpares):
            self.warm.fill_now(command.why)
        elif isinstance(command, DumpStacks):
            self.dumps.begin(self.tasks.values(), time.monotonic())
        elif isinstance(command, SignalTasks | StopAt):
            if (bad := tell_tasks(self.tasks.values(), command)) is not None:
                self.outbox.put(AgentError(message=bad))
        else:
            self.outbox.put(AgentError(message=f"unexpected command {command.TYPE!r}"))

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
        self.warm.pool.close()
        if not self.teardown.started:
            self.teardown.begin(EOF_GRACE_S, time.monotonic())

    def tick(self) -> None:
        now = time.monotonic()
        self.stops.step(now)
        if not self.teardown.started:
            self.warm.tick(now)
            self.start_due()
        silence = self.launch.coordinator_timeout_s if self.launch else None
        if not self.input_closed and self.silence.gone(silence, now):  # a stop is no silence
            note(f"no word from the coordinator for {silence:g}s; stopping every task")
            self.selector.unregister(self.commands_fd)
            self._coordinator_lost()
        if (dumped := self.dumps.step(now)) is not None:
            self.outbox.put(dumped)
        if self.teardown.step(now):
            self.outbox.put(Terminated(ts=time.time()))
        idle = not self.teardown.started or self.teardown.all_gone
        interval = self.launch.heartbeat_interval_s if self.launch else 1.0
        if idle and not self.input_closed and now >= self.next_heartbeat:
            self.next_heartbeat = now + interval
            self.outbox.put(self._heartbeat())
        if now >= self.next_record:
            self.next_record = now + interval
            self.record()
        for name, task in list(self.dropping.items()):
            for notice in task.notices(now):
                self.outbox.put(notice)
            if task.notice_due_at() is None:
                del self.dropping[name]

    def _heartbeat(self) -> Heartbeat:
        usage = {name: got for name, task in self.tasks.items() if (got := task.usage())}
        self.oom.sample(u.pid for u in usage.values())
        return host_memory.heartbeat(time.time(), usage, self.warm.spares_rss_bytes())

    def _timeout(self) -> float:
        now = time.monotonic()
        ending = self.teardown.wake_at(now)
        wake = self.next_heartbeat if ending is None else ending
        wake = min(wake, self.next_record, *(d for t in self.dropping.values()
                                             if (d := t.notice_due_at()) is not None),
                   *(d for d in [self.starts.due_at(now), self.outbox.due_at(), self.stops.wake_at(),
                                 self.dumps.wake_at(),
                                 self.silence.wake_at(self.launch.coordinator_timeout_s
                                                      if self.launch else None)] if d is not None))
        return max(0.0, wake - now)

    def send_pending(self) -> None:
        """Write what the coordinator takes now, and watch stdout while more is waiting."""
        self.outbox.write()
        if self.outbox.broken and not self.output_broken:
            self.output_broken = True
            self._coordinator_lost()
        waiting = self.outbox.pending()
        if waiting != self._watching_output:
            self._watching_output = waiting
            if waiting:
                self.selector.register(self.outbox.fd, selectors.EVENT_WRITE, "events")
            else:
                self.selector.unregister(self.outbox.fd)

    # --- main loop --------------------------------------------------------------------------

    def run(self) -> int:
        wake_r, wake_w = socket.socketpair()
        wake_r.setblocking(False)
        wake_w.setblocking(False)
        signal.set_wakeup_fd(wake_w.fileno(), warn_on_full_buffer=False)
        for sig in (signal.SIGCHLD, *_SHUTDOWN_SIGNALS):
            signal.signal(sig, lambda *_: None)
        process_tree.become_subreaper()
        first = greet(self.outbox, self.commands, EXIT_FLUSH_S)
        if isinstance(first, int):
            return first
        launch, commands = first
        self.silence.heard(time.monotonic())  # the launch is word from it: the wait is no silence
        if launch.process_table is not None:  # "~/..." names a path in this host's home
            self.table = process_table.TableKeeper(
                os.path.expanduser(launch.process_table), launch.process_mark, note=note,
                say=lambda text: self.outbox.put(AgentError(message=text)))
            self.table.clear_leftovers()
        self.launch = launch
        self.start_tasks(launch)
        for line in commands:
            self.handle_command(line)
        os.set_blocking(self.commands_fd, False)
        if not self.input_closed:
            self.selector.register(self.commands_fd, selectors.EVENT_READ, "commands")
        self.selector.register(wake_r, selectors.EVENT_READ, "wakeup")
        self.reap()
        while not (self.input_closed and self.teardown.all_gone):
            self.send_pending()
            for key, _ in self.selector.select(self._timeout()):
                if key.data == "task":
                    self.on_task_fd(int(key.fd))
                elif key.data == "commands":
                    self.on_command_input()
                elif key.data == "wakeup":
                    self.on_wakeup(wake_r)
                elif key.data == SELECTOR_DATA:
                    self.warm.on_readable(int(key.fd))
            self.tick()
        for task in self.tasks.values():
            task.close()
        if self.table is not None:
            self.table.remove()
        self.outbox.flush(EXIT_FLUSH_S)
        return 0
