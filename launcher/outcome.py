"""What one attempt of a job came to, as the policy and the summary see it."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from launcher.failures import FailureKind, TaskFailure, root_cause


class AttemptStatus(str, Enum):
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    INTERRUPTED = "interrupted"  # tfcluster itself got SIGINT / SIGTERM


@dataclass(frozen=True)
class AttemptResult:
    attempt: int
    status: AttemptStatus
    started_at: float
    ended_at: float
    failures: tuple[TaskFailure, ...] = ()
    ports: dict[str, int] = field(default_factory=dict)
    resume_step: int | None = None
    max_step: int | None = None
    interrupt_signal: str | None = None

    @property
    def root_cause(self) -> TaskFailure | None:
        return root_cause(self.failures)

    @property
    def port_conflict(self) -> bool:
        cause = self.root_cause
        return cause is not None and cause.kind is FailureKind.PORT_CONFLICT

    def to_dict(self) -> dict[str, Any]:
        cause = self.root_cause
        return {
            "attempt": self.attempt,
            "status": self.status.value,
            "started_at": self.started_at,
            "ended_at": self.ended_at,
            "duration_s": round(self.ended_at - self.started_at, 3),
            "resume_step": self.resume_step,
            "max_step": self.max_step,
            "root_cause": None if cause is None else cause.to_dict(),
            "failures": [f.to_dict() for f in sorted(self.failures, key=lambda f: f.died_at)],
            "ports": self.ports,
            "interrupt_signal": self.interrupt_signal,
        }
