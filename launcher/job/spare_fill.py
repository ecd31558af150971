"""With warm spares: the agents fill their spares as soon as training is seen to run. A step
reported, or their own tasks past start-up, they see for themselves
(:mod:`worker.agent.spares.warm_starts`); a checkpoint is written where only the coordinator can
look, on the chief's host. :class:`FirstCheckpointWatch`, a hook of every attempt, looks at the
chief's checkpoint directory a few times a second (through the engine's ``ChiefFiles``, as the
resume checkpoint is found) from the attempt's start until the first checkpoint newer than the
one there at the start appears, and then tells every agent :class:`FillSpares`. It stops looking
once a step was reported, or after ``restart.spare_fill_delay_s`` (the agents fill then anyway).
"""

from __future__ import annotations

import math
from collections.abc import Callable

from launcher.chief.access import ChiefFiles
from launcher.chief.checkpoints import latest_checkpoint
from launcher.job.hooks import TaskControl
from launcher.plan.planner import LaunchPlan
from launcher.spec.model import ClusterSpec
from worker.wire.protocol import FillSpares, Message
from worker.wire.safe_open import UnsafeFileError

#: How often the chief's directory is looked at while the spares wait (a few small reads).
LOOK_EVERY_S = 0.5
#: The same over a remote host's file access (SFTP round trips).
REMOTE_LOOK_EVERY_S = 2.0


class FirstCheckpointWatch:
    """Tells the agents (``send_all``) to fill their spares at the attempt's first checkpoint."""

    def __init__(self, send_all: Callable[[Message], object], chief_files: ChiefFiles,
                 fill_delay_s: float) -> None:
        self._send_all = send_all
        self._chief_files = chief_files
        self._fill_delay_s = fill_delay_s
        self._attempt: int | None = None
        self._before: str | None = None  # the latest checkpoint when the attempt began
        self._next_at = 0.0
        self._done = True

    def on_progress(self, control: TaskControl, task: str, step: int) -> None:
        if control.attempt == self._attempt:
            self._done = True  # the agents fill at the first step themselves

    def on_exited(self, control: TaskControl, task: str) -> None:
        """Nothing to do when a task exits."""

    def on_tick(self, control: TaskControl, now: float) -> float:
        plan = control.plan
        if control.attempt != self._attempt:  # a new attempt: what is there now is the old
            self._attempt, self._next_at = control.attempt, now
            self._done = plan.checkpoint_dir is None or control.first_progress_at is not None
            if not self._done:
                self._before = self._latest(plan)
        if self._done or now - control.started_at >= self._fill_delay_s:
            self._done = True
            return math.inf
        if now < self._next_at:
            return self._next_at
        self._next_at = now + (LOOK_EVERY_S if plan.chief_host.local else REMOTE_LOOK_EVERY_S)
        latest = self._latest(plan)
        if latest is not None and latest != self._before:
            self._done = True
            self._send_all(FillSpares(why=f"the attempt's first checkpoint appeared: {latest}"))
            return math.inf
        return self._next_at

    def _latest(self, plan: LaunchPlan) -> str | None:
        directory = plan.checkpoint_dir
        if directory is None:
            return None
        try:
            with self._chief_files.fs(plan.chief_host) as fs:
                if fs is None:
                    return None
                found = latest_checkpoint(directory, fs).checkpoint
        except (OSError, UnsafeFileError):  # said when the next attempt's resume is looked for
            return None
        return None if found is None else found.prefix


def first_checkpoint_watch(spec: ClusterSpec, send_all: Callable[[Message], object],
                           chief_files: ChiefFiles) -> FirstCheckpointWatch | None:
    """The watch for a job with warm spares (None without them)."""
    if not spec.restart.warm_spares:
        return None
    return FirstCheckpointWatch(send_all, chief_files, spec.restart.spare_fill_delay_s)
