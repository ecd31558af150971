"""The ``slurm_attempt`` event: at the start of each attempt of a Slurm run, which Slurm job it
is (``SLURM_JOB_ID``, ``SLURM_RESTART_COUNT``: how often Slurm requeued it), the nodes the
attempt runs on and those left out. Written by an attempt hook that wraps any other (a drill's).
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any, ClassVar

from launcher.job.hooks import AttemptHooks, TaskControl
from launcher.output.events import EventType
from launcher.plan.slurm_planner import SlurmPlanner


@dataclass(frozen=True)
class SlurmAttempt:
    TYPE: ClassVar[EventType] = EventType.SLURM_ATTEMPT
    attempt: int
    job_id: str | None
    restart_count: int
    nodes: Sequence[str]
    left_out: Sequence[str]

    def record(self) -> dict[str, Any]:
        return asdict(self)


class SlurmEventHooks:
    """Emits one :class:`SlurmAttempt` per attempt, then passes every call on to ``inner``."""

    def __init__(self, planner: SlurmPlanner, inner: AttemptHooks | None = None) -> None:
        self.planner = planner
        self.inner = inner
        self._announced: set[int] = set()

    def _announce(self, control: TaskControl) -> None:
        if control.attempt in self._announced:
            return
        self._announced.add(control.attempt)
        try:
            restarts = int(os.environ.get("SLURM_RESTART_COUNT") or 0)
        except ValueError:
            restarts = 0
        control.emit(SlurmAttempt(
            attempt=control.attempt, job_id=os.environ.get("SLURM_JOB_ID"),
            restart_count=restarts, nodes=[n.name for n in self.planner.usable_nodes()],
            left_out=self.planner.bad_nodes()))

    def on_progress(self, control: TaskControl, task: str, step: int) -> None:
        self._announce(control)
        if self.inner is not None:
            self.inner.on_progress(control, task, step)

    def on_tick(self, control: TaskControl, now: float) -> float:
        self._announce(control)
        return self.inner.on_tick(control, now) if self.inner is not None else math.inf
