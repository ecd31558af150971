"""The events of a job whose tasks are restarted one at a time (``strategy: parameter_server``):
a task started again while the others run on, a worker left out for a crash loop, and the chief
finishing the job.

Imported with the package (``launcher/run/__init__.py``), so every reader of ``events.jsonl``
knows them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar

from launcher.run.events import Event


@dataclass(frozen=True)
class TaskRestarted(Event):
    """``task`` failed and is started again alone (with ``together``: tasks restarted with it,
    a ps's chief) while the others run on; ``restarts``: its restarts over the job so far."""

    TYPE: ClassVar[str] = "task_restarted"
    attempt: int
    task: str
    host: str
    #: How it failed ("killed by SIGKILL", "exited 1", "its port stopped answering ...").
    cause: str
    reason: str
    restarts: int
    backoff_s: float
    together: Sequence[str] = ()
    #: The step the chief resumes from (None: not the chief, or no checkpoint).
    resume_step: int | None = None


@dataclass(frozen=True)
class TaskLeftOut(Event):
    """A worker in a crash loop is not restarted any more: the job goes on without it."""

    TYPE: ClassVar[str] = "task_left_out"
    attempt: int
    task: str
    host: str
    cause: str
    reason: str


@dataclass(frozen=True)
class ChiefFinished(Event):
    """The chief of a parameter_server job exited 0: the job is done, the servers are stopped."""

    TYPE: ClassVar[str] = "chief_finished"
    attempt: int
    stopping: Sequence[str]
