"""``events.jsonl``: one JSON object per line, each with ``ts`` and ``event``.

The event types are a contract (the README lists them): ``job_started``, ``task_started``,
``task_progress``, ``checkpoint_found``, ``task_failed``, ``job_restarting``, ``job_succeeded``,
``job_failed``, the drill event ``fault_injected``, and tfcluster's additions in :class:`EventType`.
What each carries is defined once, as a dataclass, in :mod:`launcher.job.events`.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from enum import Enum
from pathlib import Path
from typing import Any, ClassVar, Protocol, TextIO


class EventType(str, Enum):
    JOB_STARTED = "job_started"
    ATTEMPT_STARTED = "attempt_started"
    TASK_STARTED = "task_started"
    TASK_PROGRESS = "task_progress"
    TASK_EXITED = "task_exited"
    TASK_PREEMPTED = "task_preempted"
    CHECKPOINT_FOUND = "checkpoint_found"
    TASK_FAILED = "task_failed"
    FAULT_INJECTED = "fault_injected"
    JOB_STOPPING = "job_stopping"
    JOB_RESTARTING = "job_restarting"
    JOB_RESUMED = "job_resumed"
    JOB_SUCCEEDED = "job_succeeded"
    JOB_FAILED = "job_failed"
    JOB_HEALTH = "job_health"
    TASK_STRAGGLING = "task_straggling"
    TASK_MEMORY_HIGH = "task_memory_high"
    MODEL_EXPORTED = "model_exported"
    SLURM_ATTEMPT = "slurm_attempt"


class Event(Protocol):
    """One fact about the job, as written to ``events.jsonl``."""

    TYPE: ClassVar[EventType]

    def record(self) -> dict[str, Any]:
        """The event's fields (without ``ts`` and ``event``), JSON-ready."""
        ...


Listener = Callable[[dict[str, Any]], None]


class EventLog:
    """Appends events to a file (flushed per line, so a crash loses nothing) and tells listeners.
    A write that fails raises its OSError naming the file; listeners hear only what was written."""

    def __init__(self, path: Path, clock: Callable[[], float] = time.time) -> None:
        self.path = path
        self._clock = clock
        self._file: TextIO = path.open("a", encoding="utf-8")
        self._lock = threading.Lock()
        self._listeners: list[Listener] = []

    def subscribe(self, listener: Listener) -> None:
        self._listeners.append(listener)

    def emit(self, event: Event) -> dict[str, Any]:
        record = {"ts": self._clock(), "event": event.TYPE.value, **event.record()}
        line = json.dumps(record, separators=(",", ":"), default=str)
        with self._lock:
            try:
                self._file.write(line + "\n")
                self._file.flush()
            except OSError as exc:  # e.g. ENOSPC: name the file, which a write error does not
                exc.filename = exc.filename or str(self.path)
                raise
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
