"""Every event the job writes to ``events.jsonl``, one frozen dataclass per event type: the one
place that says what each event carries (the coordinator and the attempt create them; the live
status, drills and tests read the records)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, fields, is_dataclass
from typing import Any, ClassVar

from launcher.job.failures import TaskFailure
from launcher.output.events import EventType


@dataclass(frozen=True)
class _Event:
    TYPE: ClassVar[EventType]

    def record(self) -> dict[str, Any]:
        # not dataclasses.asdict: it deep-copies every value, and events are written at the
        # rate tasks report (a large part of the coordinator's CPU with 64 tasks)
        return {f.name: _plain(getattr(self, f.name)) for f in fields(self)}


def _plain(value: Any) -> Any:
    """``value`` ready for JSON: nested dataclasses (alone or in a sequence) become dicts."""
    if is_dataclass(value) and not isinstance(value, type):
        return asdict(value)
    if isinstance(value, list | tuple) and any(is_dataclass(item) for item in value):
        return [_plain(item) for item in value]
    return value


@dataclass(frozen=True)
class JobStarted(_Event):
    TYPE: ClassVar[EventType] = EventType.JOB_STARTED
    job: str
    run_dir: str
    tasks: Sequence[str]
    hosts: Sequence[str]


@dataclass(frozen=True)
class AttemptStarted(_Event):
    TYPE: ClassVar[EventType] = EventType.ATTEMPT_STARTED
    attempt: int
    resume_step: int | None
    resume_checkpoint: str | None
    ports: Mapping[str, int]


@dataclass(frozen=True)
class TaskStarted(_Event):
    TYPE: ClassVar[EventType] = EventType.TASK_STARTED
    attempt: int
    task: str
    host: str
    pid: int
    log: str
    #: Started from a warm spare; with warm spares on, ``cold_reason`` says why it was not.
    warm: bool = False
    cold_reason: str | None = None


@dataclass(frozen=True)
class TaskProgress(_Event):
    TYPE: ClassVar[EventType] = EventType.TASK_PROGRESS
    attempt: int
    task: str
    step: int
    metrics: Mapping[str, Any]
    first: bool


@dataclass(frozen=True)
class TaskExited(_Event):
    """A task exited 0, or was stopped by tfcluster (a failure is a :class:`TaskFailed`)."""

    TYPE: ClassVar[EventType] = EventType.TASK_EXITED
    attempt: int
    task: str
    host: str
    exit_code: int | None
    signal: str | None = None
    stopped: bool = False


@dataclass(frozen=True)
class TaskPreempted(_Event):
    TYPE: ClassVar[EventType] = EventType.TASK_PREEMPTED
    attempt: int
    task: str
    step: Any


@dataclass(frozen=True)
class TaskFailed(_Event):
    TYPE: ClassVar[EventType] = EventType.TASK_FAILED
    failure: TaskFailure

    def record(self) -> dict[str, Any]:
        return self.failure.to_dict()


@dataclass(frozen=True)
class FaultInjected(_Event):
    TYPE: ClassVar[EventType] = EventType.FAULT_INJECTED
    attempt: int
    task: str
    host: str
    signal: str
    step: int


@dataclass(frozen=True)
class JobStopping(_Event):
    TYPE: ClassVar[EventType] = EventType.JOB_STOPPING
    attempt: int
    reason: str


@dataclass(frozen=True)
class SkippedCheckpoint:
    checkpoint: str
    reason: str


@dataclass(frozen=True)
class CheckpointFound(_Event):
    TYPE: ClassVar[EventType] = EventType.CHECKPOINT_FOUND
    attempt: int
    step: int | None
    checkpoint: str
    #: Where the chief's checkpoints were found: ``checkpoint.dir`` or its Keras ``chief/``.
    directory: str | None = None
    skipped: Sequence[SkippedCheckpoint] = field(default_factory=tuple)


@dataclass(frozen=True)
class JobRestarting(_Event):
    TYPE: ClassVar[EventType] = EventType.JOB_RESTARTING
    attempt: int
    reason: str
    backoff_s: float
    counts_against_budget: bool
    resume_step: int | None
    resume_checkpoint: str | None


@dataclass(frozen=True)
class JobResumed(_Event):
    """``tfcluster run --resume``: a new coordinator continues the run (see
    :mod:`launcher.job.resume`); the earlier coordinator's loss is not counted against the budget."""

    TYPE: ClassVar[EventType] = EventType.JOB_RESUMED
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
class JobSucceeded(_Event):
    TYPE: ClassVar[EventType] = EventType.JOB_SUCCEEDED
    job: str
    attempts: int


@dataclass(frozen=True)
class JobFailed(_Event):
    TYPE: ClassVar[EventType] = EventType.JOB_FAILED
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
class JobHealth(_Event):
    """Every few seconds: per task its step, steps/s, CPU % and RSS; the slowest task and the
    stragglers (:mod:`launcher.job.task_health`)."""

    TYPE: ClassVar[EventType] = EventType.JOB_HEALTH
    attempt: int
    tasks: Mapping[str, Mapping[str, Any]]
    steps_per_s: float | None
    slowest: str | None
    stragglers: Sequence[str]


@dataclass(frozen=True)
class TaskStraggling(_Event):
    """A task's step rate stayed below ``ratio`` x the others' for the window (or, with
    ``straggling`` false, caught up again)."""

    TYPE: ClassVar[EventType] = EventType.TASK_STRAGGLING
    attempt: int
    task: str
    straggling: bool
    steps_per_s: float
    others_steps_per_s: float
    since: float
    ratio: float
    window_s: float


@dataclass(frozen=True)
class TaskMemoryHigh(_Event):
    TYPE: ClassVar[EventType] = EventType.TASK_MEMORY_HIGH
    attempt: int
    task: str
    host: str
    rss_bytes: int
    available_bytes: int | None
    limit_bytes: int | None
    message: str
