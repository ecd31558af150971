"""Hooks into a running attempt: how a drill's fault injector (or any other observer that acts)
reaches the tasks without the attempt knowing about drills."""

from __future__ import annotations

import signal
from typing import Protocol

from launcher.output.events import Event


class TaskControl(Protocol):
    """What a hook may do to the running attempt."""

    @property
    def attempt(self) -> int: ...

    def signal_task(self, task: str, sig: signal.Signals) -> str | None:
        """Send ``sig`` to one task; the host it runs on, or None if it cannot be reached."""

    def emit(self, event: Event) -> None: ...

    def warn(self, text: str) -> None: ...


class AttemptHooks(Protocol):
    """Called by the attempt as it runs (a drill's fault injector is one)."""

    def on_progress(self, control: TaskControl, task: str, step: int) -> None: ...
