"""Every event a run writes to ``events.jsonl``: the names (:class:`EventType`), one frozen
dataclass per event saying what it carries, and :func:`parse`, which reads a record back into its
dataclass. The one place that says what each event holds: the coordinator, the attempt, drills and
engines create them; the event log (:mod:`launcher.run.event_log`) writes them; ``status``,
``logs``, ``--resume``, drills and benchmarks read them.

The names and fields are a contract (DESIGN.md; docs/reference/events.md is generated from here):
``job_started``, ``task_started``, ``task_progress``, ``checkpoint_found``, ``task_failed``,
``job_restarting``, ``job_succeeded``, ``job_failed``, the drill event ``fault_injected``, and more.

An engine records its own facts by subclassing :class:`Event` with a name of its own::

    @dataclass(frozen=True)
    class NodesAttempt(Event):
        TYPE: ClassVar[str] = "nodes_attempt"
        attempt: int
        nodes: Sequence[str]

Defining the class registers it (two classes may not claim one name); :func:`parse` knows it once
its module is imported, and reads any name it does not know as an :class:`UnknownEvent`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, fields, is_dataclass
from enum import Enum
from typing import Any, ClassVar

from launcher.run.failures import TaskFailure
from launcher.run.from_json import RecordError, build


class EventType(str, Enum):
    JOB_STARTED = "job_started"
    ATTEMPT_STARTED = "attempt_started"
    TASK_STARTED = "task_started"
    TASK_PROGRESS = "task_progress"
    TASK_EXITED = "task_exited"
    TASK_PREEMPTED = "task_preempted"
    CHECKPOINT_FOUND = "checkpoint_found"
    TASK_FAILED = "task_failed"
    FAULT_INJECTED = "fault_injected"
    JOB_STOPPING = "job_stopping"
    JOB_RESTARTING = "job_restarting"
    JOB_RESUMED = "job_resumed"
    JOB_SUCCEEDED = "job_succeeded"
    JOB_FAILED = "job_failed"
    JOB_HEALTH = "job_health"
    TASK_STRAGGLING = "task_straggling"
    TASK_MEMORY_HIGH = "task_memory_high"
    MODEL_EXPORTED = "model_exported"


#: Times are epoch seconds before this (the year 5138): larger ones no calendar shows.
MAX_TS = 1e11

#: The events that end a job.
JOB_ENDS = frozenset({EventType.JOB_SUCCEEDED, EventType.JOB_FAILED})


def _name(kind: str) -> str:
    return kind.value if isinstance(kind, Enum) else str(kind)


@dataclass(frozen=True)
class Event:
    """One fact about the run, as written to ``events.jsonl`` (with ``ts`` and ``event``). A
    subclass that sets ``TYPE`` (an :class:`EventType`, or an engine's own name) is the event of
    that name; a subclass that does not is a kind of its parent's event."""

    TYPE: ClassVar[str]
    #: The name written as ``event`` (set when the class is defined).
    NAME: ClassVar[str]
    _BY_NAME: ClassVar[dict[str, type[Event]]] = {}

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "TYPE" not in cls.__dict__:
            return
        name = _name(cls.TYPE)
        known = Event._BY_NAME.get(name)
        if known is not None and (known.__module__, known.__qualname__) != \
                (cls.__module__, cls.__qualname__):  # the same class again: a reloaded module
            raise TypeError(f"event {name!r} is already {known.__module__}.{known.__qualname__}")
        Event._BY_NAME[name] = cls
        cls.NAME = name

    @property
    def event_name(self) -> str:
        return self.NAME

    def record(self) -> dict[str, Any]:
        """The event's fields (without ``ts`` and ``event``), JSON-ready."""
        # not dataclasses.asdict: it deep-copies every value, and events are written at the
        # rate tasks report (a large part of the coordinator's CPU with 64 tasks)
        return {f.name: _plain(getattr(self, f.name)) for f in fields(self)}

    @classmethod
    def from_record(cls, fields: Mapping[str, Any]) -> Event:
        """The event from its record's fields (what :meth:`record` wrote). Raises
        :class:`~launcher.run.from_json.RecordError`."""
        return build(cls, fields, cls.NAME)


def _plain(value: Any) -> Any:
    """``value`` ready for JSON: nested dataclasses (alone or in a sequence) become dicts."""
    if is_dataclass(value) and not isinstance(value, type):
        return asdict(value)
    if isinstance(value, list | tuple) and any(is_dataclass(item) for item in value):
        return [_plain(item) for item in value]
    return value


@dataclass(frozen=True)
class UnknownEvent(Event):
    """A record whose name no imported event class claims (an engine's event whose module is not
    loaded, or one a newer tfcluster wrote): kept as it was."""

    name: str
    fields: Mapping[str, Any]

    @property
    def event_name(self) -> str:
        return self.name

    def record(self) -> dict[str, Any]:
        return dict(self.fields)


@dataclass(frozen=True)
class Logged:
    """One line of ``events.jsonl`` read back: when it was written and the event."""

    ts: float
    event: Event


def parse(record: Mapping[str, Any]) -> Logged:
    """A record of ``events.jsonl`` (one line, as JSON) as its typed event. Raises
    :class:`~launcher.run.from_json.RecordError` (a ``ValueError``) for a record that is not
    an event or whose fields do not fit its type."""
    if not isinstance(record, Mapping):
        raise RecordError("event", "an object", record)
    name, ts = record.get("event"), record.get("ts")
    if not isinstance(name, str):
        raise RecordError("event", "an event name", name)
    if not isinstance(ts, int | float) or isinstance(ts, bool) or not 0 <= ts < MAX_TS:
        raise RecordError(f"{name}.ts", "a time", ts)  # (not NaN, 1e300: a date can show it)
    data = {k: v for k, v in record.items() if k not in ("ts", "event")}
    kind = Event._BY_NAME.get(name)
    event = UnknownEvent(name, data) if kind is None else kind.from_record(data)
    return Logged(float(ts), event)


@dataclass(frozen=True)
class JobStarted(Event):
    TYPE: ClassVar[str] = EventType.JOB_STARTED
    job: str
    run_dir: str
    tasks: Sequence[str]
    hosts: Sequence[str]


@dataclass(frozen=True)
class AttemptStarted(Event):
    TYPE: ClassVar[str] = EventType.ATTEMPT_STARTED
    attempt: int
    resume_step: int | None
    resume_checkpoint: str | None
    ports: Mapping[str, int]


@dataclass(frozen=True)
class TaskStarted(Event):
    TYPE: ClassVar[str] = EventType.TASK_STARTED
    attempt: int
    task: str
    host: str
    pid: int
    log: str
    #: Started from a warm spare; with warm spares on, ``cold_reason`` says why it was not.
    warm: bool = False
    cold_reason: str | None = None


@dataclass(frozen=True)
class TaskProgress(Event):
    TYPE: ClassVar[str] = EventType.TASK_PROGRESS
    attempt: int
    task: str
    step: int
    metrics: Mapping[str, Any]
    first: bool
    received_at: float | None = None  # when the report arrived: steps/s (run/step_figures.py)


@dataclass(frozen=True)
class TaskExited(Event):
    """A task exited 0, or was stopped by tfcluster (a failure is a :class:`TaskFailed`)."""

    TYPE: ClassVar[str] = EventType.TASK_EXITED
    attempt: int
    task: str
    host: str
    exit_code: int | None
    signal: str | None = None
    stopped: bool = False


@dataclass(frozen=True)
class TaskPreempted(Event):
    TYPE: ClassVar[str] = EventType.TASK_PREEMPTED
    attempt: int
    task: str
    step: Any


@dataclass(frozen=True)
class TaskFailed(Event):
    TYPE: ClassVar[str] = EventType.TASK_FAILED
    failure: TaskFailure

    def record(self) -> dict[str, Any]:
        return self.failure.to_dict()

    @classmethod
    def from_record(cls, fields: Mapping[str, Any]) -> TaskFailed:
        return cls(TaskFailure.from_dict(fields))


@dataclass(frozen=True)
class FaultInjected(Event):
    """A drill's fault: ``task`` (the first task hurt), ``signal`` and ``step`` (the last step
    every task of the attempt had reached) plus the fault as written, what it resolved to and
    what was done (``detail``: the checkpoint corrupted, the route added)."""

    TYPE: ClassVar[str] = EventType.FAULT_INJECTED
    attempt: int
    task: str
    host: str
    signal: str
    step: int
    fault: str = ""
    action: str = ""
    trigger: str = ""
    tasks: Sequence[str] = ()
    detail: str = ""
    #: When the fault was applied (wall clock, just before the signal was sent or the file
    #: touched): the event's own ``ts`` is when it was written, which can come after the agent
    #: already saw the task die.
    sent_at: float = 0.0


@dataclass(frozen=True)
class JobStopping(Event):
    TYPE: ClassVar[str] = EventType.JOB_STOPPING
    attempt: int
    reason: str


@dataclass(frozen=True)
class SkippedCheckpoint:
    checkpoint: str
    reason: str


@dataclass(frozen=True)
class CheckpointFound(Event):
    TYPE: ClassVar[str] = EventType.CHECKPOINT_FOUND
    attempt: int
    step: int | None
    checkpoint: str
    #: Where the chief's checkpoints were found: ``checkpoint.dir`` or its Keras ``chief/``.
    directory: str | None = None
    skipped: Sequence[SkippedCheckpoint] = field(default_factory=tuple)


@dataclass(frozen=True)
class JobRestarting(Event):
    TYPE: ClassVar[str] = EventType.JOB_RESTARTING
    attempt: int
    reason: str
    backoff_s: float
    counts_against_budget: bool
    resume_step: int | None
    resume_checkpoint: str | None


@dataclass(frozen=True)
class JobResumed(Event):
    """``tfcluster run --resume``: a new coordinator continues the run (see
    :mod:`launcher.job.resume`); the earlier coordinator's loss is not counted against the budget."""

    TYPE: ClassVar[str] = EventType.JOB_RESUMED
    job: str
    #: The attempt about to start (numbered after the last one in the events).
    attempt: int
    previous_attempt: int | None
    #: How the earlier coordinator ended ("was lost (...)", "was stopped by SIGTERM").
    previous_coordinator: str
    restarts_used: int
    max_restarts: int
    counts_against_budget: bool
    resume_step: int | None
    resume_checkpoint: str | None


@dataclass(frozen=True)
class JobSucceeded(Event):
    TYPE: ClassVar[str] = EventType.JOB_SUCCEEDED
    job: str
    attempts: int


@dataclass(frozen=True)
class JobFailed(Event):
    TYPE: ClassVar[str] = EventType.JOB_FAILED
    job: str
    reason: str
    exit_code: int
    attempts: int
    root_cause: TaskFailure | None

    def record(self) -> dict[str, Any]:
        return {"job": self.job, "reason": self.reason, "exit_code": self.exit_code,
                "attempts": self.attempts,
                "root_cause": None if self.root_cause is None else self.root_cause.to_dict()}


@dataclass(frozen=True)
class JobHealth(Event):
    """Every few seconds: per task its step, steps/s, CPU % and RSS; the slowest task and the
    stragglers (:mod:`launcher.job.task_health`)."""

    TYPE: ClassVar[str] = EventType.JOB_HEALTH
    attempt: int
    tasks: Mapping[str, Mapping[str, Any]]
    steps_per_s: float | None
    slowest: str | None
    stragglers: Sequence[str]
    #: In a lock-step job: the task holding the others back and why (:mod:`launcher.job.lockstep`).
    held_back_by: str | None = None


@dataclass(frozen=True)
class TaskStraggling(Event):
    """A task's step rate stayed below ``ratio`` x the others' for the window (``cause``
    ``slow_steps``), or in a lock-step job it holds the others back (``starved`` of CPU, or
    ``more_work`` per step: :mod:`launcher.job.lockstep`, where the step rates are the job's);
    with ``straggling`` false, it stopped being one."""

    TYPE: ClassVar[str] = EventType.TASK_STRAGGLING
    attempt: int
    task: str
    straggling: bool
    steps_per_s: float | None
    others_steps_per_s: float | None
    since: float
    ratio: float
    window_s: float
    cause: str = "slow_steps"
    #: The line shown on the console (and by ``status``).
    message: str | None = None
    #: Lock-step causes: its CPU (cores) and run-queue wait share, and the others' median.
    cpu_cores: float | None = None
    wait_share: float | None = None
    others_cpu_cores: float | None = None
    others_wait_share: float | None = None


@dataclass(frozen=True)
class TaskMemoryHigh(Event):
    TYPE: ClassVar[str] = EventType.TASK_MEMORY_HIGH
    attempt: int
    task: str
    host: str
    rss_bytes: int
    available_bytes: int | None
    limit_bytes: int | None
    message: str


@dataclass(frozen=True)
class ModelExported(Event):
    """A model the chief exported (``worker.save_model``, ``worker.saving.model_checkpoint``),
    from a task's ``exported`` report."""

    TYPE: ClassVar[str] = EventType.MODEL_EXPORTED
    attempt: int
    task: str
    path: str
    format: str

    @classmethod
    def from_report(cls, attempt: int, task: str, data: Mapping[str, Any]) -> ModelExported:
        return cls(attempt, task=task, path=str(data.get("path", "")),
                   format=str(data.get("format", "")))
