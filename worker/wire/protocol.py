"""The agent protocol: JSON lines between the coordinator and one agent per host.

Coordinator -> agent (the agent's stdin): first a :class:`Launch`, later :class:`SignalTasks`,
:class:`DumpStacks`, :class:`StartTask` / :class:`StopTask` (one task alone), :class:`StopAt` (the
job's stop step on a preemption notice), :class:`FillSpares` (training is seen to run) and
:class:`Terminate`. Closing stdin (EOF) means the
coordinator is gone: the agent kills every task's process tree and exits.

Agent -> coordinator (the agent's stdout): :class:`Hello` once (with its versions, which the
coordinator checks first: :mod:`worker.wire.handshake`), then per task :class:`Started`,
:class:`Output`, :class:`Progress`, :class:`TaskReport`, :class:`Exited`; :class:`Heartbeat` for the
host; :class:`StacksDumped` when the dumps a :class:`DumpStacks` asked for are written;
:class:`Terminated` when a terminate request (or EOF) has finished; :class:`AgentError` when
the agent cannot do something or make sense of what a task sent (it goes on).

Every message is a frozen dataclass; on the wire it is its fields plus ``"type"``. The same code runs
on both ends, so the two sides can never disagree about a field name.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, fields
from typing import Any, ClassVar

from worker.wire.env import PROCESS_MARK, TF_CONFIG
from worker.wire.tfconfig import TaskId, TFConfig
from worker.wire.version import PROTOCOL_VERSION, TFCLUSTER_VERSION


class ProtocolError(ValueError):
    """A line that is not a message of this protocol."""


@dataclass(frozen=True)
class Message:
    TYPE: ClassVar[str] = ""

    def encode(self) -> bytes:
        payload = {"type": self.TYPE, **_plain(self)}
        return (json.dumps(payload, separators=(",", ":")) + "\n").encode()


def _plain(value: Any) -> Any:
    """``value`` as JSON takes it: a dataclass as the dict of its fields, recursively (what
    ``dataclasses.asdict`` gives, without its deep copy of every leaf: 4x faster)."""
    if hasattr(value, "__dataclass_fields__"):
        return {f.name: _plain(getattr(value, f.name)) for f in fields(value)}
    if isinstance(value, list | tuple):
        return [_plain(item) for item in value]
    if isinstance(value, dict):
        return {key: _plain(item) for key, item in value.items()}
    return value


# --- coordinator -> agent ---------------------------------------------------------------------


@dataclass(frozen=True)
class TaskLaunch:
    """How to start one task: argv without a shell, env overlaid on the agent's own, cwd."""

    task: str
    argv: list[str]
    env: dict[str, str]
    cwd: str


@dataclass(frozen=True)
class Launch(Message):
    """Start these tasks. ``cluster`` is TF_CONFIG's cluster, sent once: the agent gives each task
    its TF_CONFIG, so the message grows with the number of tasks, not with its square."""

    TYPE: ClassVar[str] = "launch"
    job: str
    attempt: int
    tasks: list[TaskLaunch]
    cluster: dict[str, list[str]] = field(default_factory=dict)
    heartbeat_interval_s: float = 1.0
    grace_period_s: float = 10.0
    #: The coordinator pings every ``heartbeat_interval_s``; an agent that hears nothing from it
    #: for this long (a network partition that TCP has not noticed) kills its tasks and exits.
    coordinator_timeout_s: float | None = None
    #: A file on the agent's host in which it keeps the list of every process it owns
    #: (:mod:`worker.wire.process_table`). Processes a dead agent left listed there are killed before
    #: any task starts; the coordinator calls ``kill_recorded`` on it when an agent dies.
    process_table: str | None = None
    #: The mark the agent puts in the environment of every process it starts, and by which what
    #: a dead agent left is known (:mod:`worker.wire.process_mark`); None: nothing is marked, and
    #: nothing a dead agent left is killed.
    process_mark: str | None = None
    #: Warm spares (``restart.warm_spares``): the modules each spare imports before it waits
    #: for the next attempt's launch (TensorFlow, then ``entrypoint.preload``); None: no spares.
    preload: list[str] | None = None
    #: Warm spares, for scripts that never report a step: fill the pool this long after the
    #: attempt started (a reported step fills it at once).
    spare_fill_delay_s: float = 30.0
    #: How many of this host's tasks may be in their start-up at once (``startup_concurrency``,
    #: :mod:`worker.agent.startup_pacing`); None: as many as the agent has CPUs; 0: no limit.
    startup_concurrency: int | None = None
    #: The coordinator's versions: an agent of another version refuses the launch before it
    #: starts anything (:mod:`worker.wire.handshake`).
    tfcluster_version: str = TFCLUSTER_VERSION
    protocol_version: int = PROTOCOL_VERSION

    def task_env(self, task: TaskLaunch) -> dict[str, str]:
        """The env overlay of one task, TF_CONFIG and the process mark included."""
        mark = {} if self.process_mark is None else {PROCESS_MARK: self.process_mark}
        if not self.cluster:
            return {**task.env, **mark}
        config = TFConfig(cluster={k: tuple(v) for k, v in self.cluster.items()},
                          task=TaskId.parse(task.task))
        return {**task.env, TF_CONFIG: config.to_json(), **mark}


@dataclass(frozen=True)
class SignalTasks(Message):
    """Send a signal (by name, e.g. ``SIGTERM``) to one task's main process, or to all tasks."""

    TYPE: ClassVar[str] = "signal"
    signal: str
    task: str | None = None


@dataclass(frozen=True)
class DumpStacks(Message):
    """Ask every task that supports it to write all its threads' Python stacks to its stderr."""

    TYPE: ClassVar[str] = "dump_stacks"


@dataclass(frozen=True)
class Ping(Message):
    """The coordinator is alive (sent every heartbeat interval)."""

    TYPE: ClassVar[str] = "ping"


@dataclass(frozen=True)
class Pause(Message):
    """The coordinator is about to stop (Ctrl-Z): until it is heard from again, its silence is a
    pause, not a loss (only the end of its connection is)."""

    TYPE: ClassVar[str] = "pause"


@dataclass(frozen=True)
class StartTask(Message):
    """Start one task of the current attempt again, alone (a ParameterServerStrategy task
    restarted while the others run on). Its last process must have exited; ``task`` may differ
    from the launch's (a chief that resumes from a newer checkpoint)."""

    TYPE: ClassVar[str] = "start_task"
    task: TaskLaunch


@dataclass(frozen=True)
class StopTask(Message):
    """TERM one task's process group and KILL it ``grace_period_s`` later; its exit is reported
    as usual. The other tasks run on."""

    TYPE: ClassVar[str] = "stop_task"
    task: str
    grace_period_s: float


@dataclass(frozen=True)
class StopAt(Message):
    """Tell ``task`` (on its control pipe, :mod:`worker.wire.control`) that the whole job stops
    after training ``step``: a preemption notice reached the coordinator, which chose the step."""

    TYPE: ClassVar[str] = "stop_at"
    task: str
    step: int


@dataclass(frozen=True)
class FillSpares(Message):
    """Training is seen to run (the attempt wrote its first checkpoint): start the warm spares
    now (:mod:`worker.agent.spares.warm_starts`), not ``Launch.spare_fill_delay_s`` after the start."""

    TYPE: ClassVar[str] = "fill_spares"
    why: str


@dataclass(frozen=True)
class Terminate(Message):
    """TERM every task's whole process tree, wait ``grace_period_s``, then KILL what is left."""

    TYPE: ClassVar[str] = "terminate"
    grace_period_s: float


# --- agent -> coordinator ---------------------------------------------------------------------


@dataclass(frozen=True)
class Hello(Message):
    """The agent is up (its first message). The coordinator reads its versions before anything
    else of it and stops the run if they are not its own (:mod:`worker.wire.handshake`)."""

    TYPE: ClassVar[str] = "hello"
    pid: int
    hostname: str
    python: str
    ts: float
    tfcluster_version: str = TFCLUSTER_VERSION
    protocol_version: int = PROTOCOL_VERSION


@dataclass(frozen=True)
class Started(Message):
    TYPE: ClassVar[str] = "started"
    task: str
    pid: int
    ts: float
    #: Started from a warm spare (already imported), not cold.
    warm: bool = False
    #: With warm spares on, why this task started cold (no spare yet, a mismatch, ...).
    cold_reason: str | None = None


@dataclass(frozen=True)
class Output(Message):
    TYPE: ClassVar[str] = "output"
    task: str
    stream: str  # "stdout" | "stderr"
    line: str


@dataclass(frozen=True)
class Progress(Message):
    TYPE: ClassVar[str] = "progress"
    task: str
    step: int
    ts: float
    metrics: dict[str, Any] = field(default_factory=dict)
    #: Metrics the task left out of this report to keep it within its bound
    #: (:data:`worker.wire.reports.MAX_PROGRESS_LINE_BYTES`).
    dropped_metrics: int = 0
    #: Earlier reports of the task this one replaced in the agent's queue while the coordinator's
    #: end was backed up (their metrics are lost: :mod:`worker.agent.outbox`).
    replaced_reports: int = 0


@dataclass(frozen=True)
class TaskReport(Message):
    """Any other message a task sent through ``worker.report.send`` (e.g. ``restore_failed``)."""

    TYPE: ClassVar[str] = "report"
    task: str
    kind: str
    ts: float
    data: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class TaskUsage:
    pid: int
    cpu_percent: float
    rss_bytes: int
    #: CPU time (user + system, all threads) and time waiting for a CPU (run-queue wait, all
    #: threads) since it started, seconds; None where this host cannot tell.
    cpu_seconds: float | None = None
    wait_seconds: float | None = None


@dataclass(frozen=True)
class Heartbeat(Message):
    TYPE: ClassVar[str] = "heartbeat"
    ts: float
    tasks: dict[str, TaskUsage] = field(default_factory=dict)
    #: Memory held by this host's warm spares, bytes (the price of warm restarts).
    spares_rss_bytes: int = 0
    #: Memory this host still has for its tasks, bytes (None: unknown): see worker.agent.host_memory.
    available_bytes: int | None = None


@dataclass(frozen=True)
class Exited(Message):
    """A task's main process ended: ``exit_code`` or ``signal`` (name) is set, never both."""

    TYPE: ClassVar[str] = "exited"
    task: str
    ts: float
    exit_code: int | None = None
    signal: str | None = None
    traceback: str | None = None
    stderr_tail: list[str] = field(default_factory=list)
    error: str | None = None  # the task could not be started at all (e.g. no such program)
    #: The most memory it ever had resident (``ru_maxrss``), bytes.
    peak_rss_bytes: int | None = None
    #: For a SIGKILL: whether the kernel's OOM killer made it (None: cannot tell), and the limit
    #: of its memory cgroup (None: none; :mod:`worker.agent.oom_evidence`).
    oom_killed: bool | None = None
    memory_limit_bytes: int | None = None


@dataclass(frozen=True)
class Terminated(Message):
    TYPE: ClassVar[str] = "terminated"
    ts: float


@dataclass(frozen=True)
class StacksDumped(Message):
    """Every task's stack dump is written, but those of ``unfinished`` (given up on)."""

    TYPE: ClassVar[str] = "stacks_dumped"
    unfinished: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class AgentError(Message):
    TYPE: ClassVar[str] = "agent_error"
    message: str



COMMANDS: dict[str, type[Message]] = {
    cls.TYPE: cls
    for cls in (Launch, SignalTasks, DumpStacks, Ping, Pause, StartTask, StopTask, StopAt,
                FillSpares, Terminate)
}
EVENTS: dict[str, type[Message]] = {
    cls.TYPE: cls
    for cls in (Hello, Started, Output, Progress, TaskReport, Heartbeat, Exited, StacksDumped,
                Terminated, AgentError)
}


def _task_launch(payload: dict[str, Any]) -> TaskLaunch:
    """A TaskLaunch whose fields have the types a process can be started from."""
    task = TaskLaunch(**payload)
    if not isinstance(task.argv, list) or not task.argv or \
            not all(isinstance(arg, str) for arg in task.argv):
        raise TypeError(f"{task.task!r}: 'argv' must be a non-empty list of strings")
    if not isinstance(task.env, dict) or \
            not all(isinstance(k, str) and isinstance(v, str) for k, v in task.env.items()):
        raise TypeError(f"{task.task!r}: 'env' must map strings to strings")
    if not isinstance(task.task, str) or not isinstance(task.cwd, str):
        raise TypeError(f"{task.task!r}: 'task' and 'cwd' must be strings")
    return task


def _build(cls: type[Message], payload: dict[str, Any]) -> Message:
    names = {f.name for f in fields(cls)}
    unknown = set(payload) - names
    if unknown:
        raise ProtocolError(f"{cls.TYPE}: unknown field(s) {sorted(unknown)}")
    try:
        if cls is Launch:
            tasks = payload.get("tasks", [])
            if not isinstance(tasks, list):
                raise TypeError("'tasks' must be a list")
            payload = {**payload, "tasks": [_task_launch(t) for t in tasks]}
        elif cls is StartTask:
            if not isinstance(payload.get("task"), dict):
                raise TypeError("'task' must be an object")
            payload = {**payload, "task": _task_launch(payload["task"])}
        elif cls is Heartbeat:
            usage = payload.get("tasks", {})
            if not isinstance(usage, dict):
                raise TypeError("'tasks' must be an object")
            payload = {**payload, "tasks": {k: TaskUsage(**v) for k, v in usage.items()}}
        return cls(**payload)
    except (TypeError, AttributeError) as exc:
        raise ProtocolError(f"{cls.TYPE}: {exc}") from exc


def decode(line: bytes | str, table: dict[str, type[Message]]) -> Message:
    """Parse one line into the message class ``table`` names for its ``type``."""
    try:
        payload = json.loads(line)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ProtocolError(f"not JSON: {exc}") from exc
    if not isinstance(payload, dict):
        raise ProtocolError("a message must be a JSON object")
    kind = payload.pop("type", None)
    cls = table.get(kind) if isinstance(kind, str) else None
    if cls is None:
        raise ProtocolError(f"unknown message type {kind!r}")
    return _build(cls, payload)


def decode_command(line: bytes | str) -> Message:
    return decode(line, COMMANDS)


def decode_event(line: bytes | str) -> Message:
    return decode(line, EVENTS)
