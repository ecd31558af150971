"""What one attempt of a job came to, as the policy and the summary see it."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from launcher.run.failures import FailureKind, TaskFailure, root_cause
from launcher.spec.failure_rules import RuleAction

#: Graceful preemptions in a row that saved no newer checkpoint and still restart outside the
#: budget on a preemption notice alone; each one after them is counted as a failure, so that a task
#: that reports a preemption and exits at once cannot restart forever.
FREE_UNSAVED_PREEMPTIONS = 3


class AttemptStatus(str, Enum):
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    INTERRUPTED = "interrupted"  # tfcluster itself got SIGINT / SIGTERM
    RESIZED = "resized"  # stopped gracefully to run at another size (a host came back)


@dataclass(frozen=True)
class AppliedRule:
    """The failure rule that matched an attempt's root cause (:mod:`launcher.job.failure_rules`):
    one of the spec's ``restart.rules`` or a built-in one, and what it decided."""

    #: Which rule: ``restart.rules[1]``, or ``built-in`` for tfcluster's own.
    rule: str
    #: What matched, in a few words: ``exit 75``, ``SIGKILL, message /NCCL/``,
    #: ``ModuleNotFoundError (No module named 'foo')``.
    matched: str
    action: RuleAction
    exclude_host: bool = False
    #: A built-in rule that fails a job whose start-up error no retry can fix: it applies only
    #: before any step of the job's first attempt.
    at_start_up: bool = False

    def to_dict(self) -> dict[str, Any]:
        return {"rule": self.rule, "matched": self.matched, "action": self.action.value,
                "exclude_host": self.exclude_host}


@dataclass(frozen=True)
class AttemptResult:
    attempt: int
    status: AttemptStatus
    started_at: float
    ended_at: float
    failures: tuple[TaskFailure, ...] = ()
    ports: dict[str, int] = field(default_factory=dict)
    resume_step: int | None = None
    max_step: int | None = None  # the highest step a task reported
    #: The step every training task had reached (:mod:`launcher.run.step_figures`).
    reached_step: int | None = None
    first_progress_at: float | None = None
    interrupt_signal: str | None = None
    #: Step of the latest complete chief checkpoint after this attempt (None: none / unknown).
    checkpoint_step: int | None = None
    #: Whether the attempt moved the latest checkpoint forward (None: the job has no checkpoints).
    made_progress: bool | None = None
    #: Checkpoints a task of this attempt could not restore (never handed out again).
    bad_checkpoints: frozenset[str] = frozenset()
    #: Memory held by the warm spares waiting for the next attempt, all hosts, bytes.
    spares_rss_bytes: int = 0
    #: The preemption notice tfcluster saw during this attempt, as a phrase for the restart
    #: reason ("worker:1 reported a preemption", "the drill sent SIGTERM to worker:1"); None if
    #: it saw none. A task that exits with the preemption code without one (and without a newer
    #: checkpoint) was not preempted as far as tfcluster can tell.
    preemption_notice: str | None = None
    #: Why tfcluster stopped the attempt to restart it at another size (status RESIZED).
    resized: str | None = None
    #: Task name -> host, and the training tasks (chief and workers) the attempt ran.
    placement: Mapping[str, str] = field(default_factory=dict)
    workers: int | None = None
    #: ParameterServerStrategy: the chief's restarts within the attempt (each spends one of
    #: ``restart.max_restarts``), every single-task restart (task -> count), the failures they
    #: recovered from, the workers left out, and why the job was given up (None: it was not).
    training_restarts: int = 0
    task_restarts: Mapping[str, int] = field(default_factory=dict)
    recovered: tuple[TaskFailure, ...] = ()
    left_out: tuple[str, ...] = ()
    gave_up: str | None = None
    chief_finished: bool = False
    #: The failure rule that matched the root cause (None: none did, or the attempt was not judged).
    rule: AppliedRule | None = None
    #: How many attempts in a row just before this one were preemptions after a notice that saved
    #: no newer checkpoint (:attr:`unsaved_preemption`): set by :func:`after_unsaved_preemptions`.
    unsaved_preemptions_before: int = 0

    @property
    def cause_kind(self) -> FailureKind | None:
        cause = self.root_cause
        return None if cause is None else cause.kind

    @property
    def root_cause(self) -> TaskFailure | None:
        return root_cause(self.failures)

    @property
    def failed_hosts(self) -> frozenset[str]:
        """Where the attempt's root cause failed (a host that keeps failing is left out)."""
        cause = self.root_cause
        return frozenset() if cause is None or cause.kind is FailureKind.LOST_HOST \
            else frozenset({cause.host})

    @property
    def lost_hosts(self) -> frozenset[str]:
        """Hosts whose agent was lost during this attempt (what an engine places around)."""
        return frozenset(f.host for f in self.failures if f.kind is FailureKind.LOST_HOST)

    @property
    def port_conflict(self) -> bool:
        return self.cause_kind is FailureKind.PORT_CONFLICT

    @property
    def preempted(self) -> bool:
        return self.cause_kind is FailureKind.PREEMPTED

    @property
    def preemption_justified(self) -> bool:
        """A preemption exit that tfcluster can vouch for: the attempt left a checkpoint newer than
        the one it resumed from, or tfcluster saw a preemption notice and fewer than
        :data:`FREE_UNSAVED_PREEMPTIONS` attempts before it in a row were preemptions that saved
        nothing. Only these restart outside the budget: exit 143 alone is what any shell wrapper
        whose child got SIGTERM returns, and a notice with nothing saved, again and again, is a
        loop."""
        if not self.preempted:
            return False
        return self.made_progress is True or (
            self.preemption_notice is not None
            and self.unsaved_preemptions_before < FREE_UNSAVED_PREEMPTIONS)

    @property
    def unsaved_preemption(self) -> bool:
        """A preemption exit after a notice that saved no newer checkpoint (counted or not)."""
        return self.preempted and self.preemption_notice is not None \
            and self.made_progress is not True

    @property
    def charged(self) -> bool:
        """Whether this attempt uses up one of ``restart.max_restarts``: every failed attempt but
        a start-up port clash and a justified preemption, unless a failure rule said otherwise
        (``restart_uncounted``: not charged; ``restart``: charged, even for a preemption)."""
        if self.status is not AttemptStatus.FAILED:
            return False
        if self.rule is not None:
            return self.rule.action is not RuleAction.RESTART_UNCOUNTED
        return not (self.port_conflict or self.preemption_justified)

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
            "reached_step": self.reached_step,
            "first_progress_at": self.first_progress_at,
            "checkpoint_step": self.checkpoint_step,
            "made_progress": self.made_progress,
            "root_cause": None if cause is None else cause.to_dict(),
            "failures": [f.to_dict() for f in sorted(self.failures, key=lambda f: f.died_at)],
            "ports": self.ports,
            "interrupt_signal": self.interrupt_signal,
            "spares_rss_bytes": self.spares_rss_bytes,
            "preemption_notice": self.preemption_notice,
            "resized": self.resized,
            "placement": dict(self.placement),
            "workers": self.workers,
            "counted_against_budget": self.charged,
            "rule": None if self.rule is None else self.rule.to_dict(),
            **({"task_restarts": dict(self.task_restarts), "training_restarts":
                self.training_restarts, "left_out": list(self.left_out),
                "recovered": [f.to_dict() for f in self.recovered]}
               if self.task_restarts or self.left_out else {}),
        }


def after_unsaved_preemptions(result: AttemptResult,
                              earlier: Sequence[AttemptResult]) -> AttemptResult:
    """``result`` (the attempt after ``earlier``) knowing how many attempts just before it were
    unsaved preemptions (:attr:`AttemptResult.unsaved_preemption`), on which
    :attr:`AttemptResult.preemption_justified` depends."""
    streak = 0
    for before in reversed(earlier):
        if not before.unsaved_preemption:
            break
        streak += 1
    if streak == result.unsaved_preemptions_before:
        return result
    return dataclasses.replace(result, unsaved_preemptions_before=streak)
