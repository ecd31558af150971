"""The session of an engine that adds nothing to a run: no extra stop signal, no events of its
own, nothing in ``summary.json``, the job's exit code (the local and SSH engines')."""

from __future__ import annotations

import contextlib
import signal
from collections.abc import Mapping, Sequence
from contextlib import AbstractContextManager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from launcher.plan.placement import PastAttempt

if TYPE_CHECKING:
    from launcher.plan.planner import HostPlan
    from launcher.run.events import Event


class PlainSession:
    stop_signals: tuple[signal.Signals, ...] = ()
    requeues_without_hosts = False

    def attempt_events(self, attempt: int, history: Sequence[PastAttempt],
                       hosts: Sequence[HostPlan]) -> Sequence[Event]:
        return ()

    def summary(self, history: Sequence[PastAttempt]) -> Mapping[str, Any]:
        return {}

    def running(self, run_dir: Path) -> AbstractContextManager[None]:
        return contextlib.nullcontext()

    @property
    def exit_code(self) -> int | None:
        return None
