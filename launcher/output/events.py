"""``events.jsonl``: one JSON object per line, each with ``ts`` and ``event``.

The event types are a contract (DESIGN.md): ``job_started``, ``task_started``, ``task_progress``,
``checkpoint_found``, ``task_failed``, ``job_restarting``, ``job_succeeded``, ``job_failed``, the drill
event ``fault_injected``, and tfcluster's additions listed in :data:`EVENT_TYPES`.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TextIO

EVENT_TYPES = frozenset({
    "job_started", "attempt_started", "task_started", "task_progress", "task_exited",
    "checkpoint_found", "task_failed", "job_stopping", "job_restarting", "job_succeeded",
    "job_failed", "fault_injected", "task_preempted",
})

Listener = Callable[[dict[str, Any]], None]


class EventLog:
    """Appends events to a file (flushed per line, so a crash loses nothing) and tells listeners."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._file: TextIO = path.open("a", encoding="utf-8")
        self._lock = threading.Lock()
        self._listeners: list[Listener] = []

    def subscribe(self, listener: Listener) -> None:
        self._listeners.append(listener)

    def emit(self, event: str, **fields: Any) -> dict[str, Any]:
        if event not in EVENT_TYPES:
            raise ValueError(f"unknown event type {event!r}")
        record = {"ts": time.time(), "event": event, **fields}
        line = json.dumps(record, separators=(",", ":"), default=str)
        with self._lock:
            self._file.write(line + "\n")
            self._file.flush()
        for listener in self._listeners:
            listener(record)
        return record

    def close(self) -> None:
        with self._lock:
            self._file.close()


def read_events(path: Path) -> list[dict[str, Any]]:
    """All events of a run directory's ``events.jsonl`` (for tests and tools)."""
    with path.open(encoding="utf-8") as handle:
        return [json.loads(line) for line in handle if line.strip()]
