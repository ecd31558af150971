"""Every event the job writes to ``events.jsonl``, one frozen dataclass per event type: the one
place that says what each event carries (the coordinator and the attempt create them; the live
status, drills and tests read the records)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, ClassVar

from launcher.job.failures import TaskFailure
from launcher.output.events import EventType


@dataclass(frozen=True)
class _Event:
    TYPE: ClassVar[EventType]

    def record(self) -> dict[str, Any]:
        return asdict(self)


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
