"""``events.jsonl``: one JSON object per line, each with ``ts`` and ``event``; written by
:class:`EventLog` alone, read back by :func:`read_events` (the records) and :func:`read_logged`
(typed, :func:`launcher.run.events.parse`). What each event carries is :mod:`launcher.run.events`.

The file is bounded: past :data:`MAX_EVENTS_BYTES` the routine events (progress, health figures)
are no longer written, past :data:`RESERVE_BYTES` more only the job's end is; what was left out is
counted by name and said in ``summary.json`` (``events``: :meth:`EventLog.summary`). Listeners hear
every event either way. Reading streams, in bounded memory (:mod:`launcher.run.event_lines`).
"""

from __future__ import annotations

import collections
import os
import threading
import time
from collections.abc import Callable, Collection
from pathlib import Path
from typing import Any, TextIO

# Importing them registers the pools' and single-task restarts' events for the reader below
# (the package itself imports none of its modules: see launcher/run/__init__.py).
from launcher.run import pool_events as _pool_events  # noqa: F401
from launcher.run import task_events as _task_events  # noqa: F401
from launcher.run.event_lines import EventLines
from launcher.run.events import JOB_ENDS, Event, EventType, Logged, parse
from launcher.run.json_text import dumps
from worker.wire.safe_open import open_appending, open_reading

#: ``events.jsonl`` takes routine events (:data:`ROUTINE`) up to this size...
MAX_EVENTS_BYTES = 128 * 1024 * 1024
#: ...and every other event up to this much more; then only the job's end.
RESERVE_BYTES = 32 * 1024 * 1024
#: The events that come at the rate tasks report, dropped first.
ROUTINE = frozenset({EventType.TASK_PROGRESS.value, EventType.JOB_HEALTH.value,
                     EventType.TASK_STRAGGLING.value, EventType.TASK_MEMORY_HIGH.value})

#: Hears each record as it is written (the console, the live status, a drill's injector).
Listener = Callable[[dict[str, Any]], None]


class EventLog:
    """Appends events to a file (flushed per line, so a crash loses nothing) and tells listeners.
    A write that fails raises its OSError naming the file; listeners hear only what was written."""

    def __init__(self, path: Path, clock: Callable[[], float] = time.time, *,
                 max_bytes: int = MAX_EVENTS_BYTES, reserve_bytes: int = RESERVE_BYTES) -> None:
        self.path = path
        self._clock = clock
        self.max_bytes, self.reserve_bytes = max_bytes, reserve_bytes
        self._file: TextIO = open_appending(path)  # never through a planted symlink
        self._lock = threading.Lock()
        self._listeners: list[Listener] = []
        self.size = os.fstat(self._file.fileno()).st_size
        #: Events not written, by name (the file reached its bound).
        self.dropped: collections.Counter[str] = collections.Counter()
        if self.size and not _ends_a_line(path):  # a crash cut the last line: end it, so that
            self._write("\n")  # the next event is not glued to it (the torn line is skipped)

    def subscribe(self, listener: Listener) -> None:
        self._listeners.append(listener)

    def emit(self, event: Event) -> dict[str, Any]:
        record = {"ts": self._clock(), "event": event.event_name, **event.record()}
        line = dumps(record, separators=(",", ":"), default=str) + "\n"  # ASCII: chars are bytes
        with self._lock:
            if self._fits(record["event"], len(line)):
                self._write(line)
            else:
                self.dropped[record["event"]] += 1
        for listener in self._listeners:
            listener(record)
        return record

    def _fits(self, name: str, size: int) -> bool:
        room = self.max_bytes + (0 if name in ROUTINE else self.reserve_bytes) - self.size
        return size <= room or name in JOB_ENDS

    def _write(self, line: str) -> None:
        try:
            self._file.write(line)
            self._file.flush()
        except OSError as exc:  # e.g. ENOSPC: name the file, which a write error does not
            exc.filename = exc.filename or str(self.path)
            raise
        self.size += len(line)

    def summary(self) -> dict[str, Any]:
        """``summary.json``'s ``events``: the file's size and bound, and the events left out."""
        with self._lock:
            return {"file": self.path.name, "bytes": self.size, "max_bytes": self.max_bytes,
                    "dropped": dict(self.dropped)}

    def close(self) -> None:
        with self._lock:
            self._file.close()


def _ends_a_line(path: Path) -> bool:
    """Whether the file's last byte ends a line (True if it cannot be read: nothing to mend)."""
    try:
        with open_reading(path) as handle:
            handle.seek(-1, os.SEEK_END)
            return handle.read(1) == b"\n"
    except OSError:
        return True


def read_events(path: Path, *, torn_ok: bool = False) -> list[dict[str, Any]]:
    """Every record of an ``events.jsonl``. A torn line (cut mid-write, NUL bytes: what a crash
    leaves) is skipped; a line that is JSON but not an event raises
    :class:`~launcher.run.event_lines.EventLineError` (a ValueError), unless ``torn_ok`` (a
    reader of a run that may still be writing): then it is skipped too. Readers of a long run
    iterate :class:`~launcher.run.event_lines.EventLines` instead: this holds them all."""
    return [record for _, record in EventLines(path, lenient=torn_ok)]


def read_logged(path: Path, *, torn_ok: bool = False,
                only: Collection[type[Event]] | None = None) -> list[Logged]:
    """The events of an ``events.jsonl``, typed: every one, or ``only`` those of these types
    (reading a long run's progress reports costs time); ``torn_ok`` as for :func:`read_events`,
    and then a record that does not fit its type is skipped too. Raises ValueError otherwise."""
    names = None if only is None else {kind.NAME for kind in only}
    logged = []
    for _, record in EventLines(path, lenient=torn_ok):
        if names is not None and record["event"] not in names:
            continue
        try:
            logged.append(parse(record))
        except ValueError:
            if not torn_ok:
                raise
    return logged
