"""``events.jsonl``: one JSON object per line, each with ``ts`` and ``event``; written by
:class:`EventLog` alone, read back by :func:`read_events` (the records) and :func:`read_logged`
(typed, :func:`launcher.run.events.parse`). What each event carries is :mod:`launcher.run.events`.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Collection
from pathlib import Path
from typing import Any, TextIO

from launcher.run.events import Event, Logged, parse

#: Hears each record as it is written (the console, the live status, a drill's injector).
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
        record = {"ts": self._clock(), "event": event.event_name, **event.record()}
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


def read_events(path: Path, *, torn_ok: bool = False) -> list[dict[str, Any]]:
    """Every record of an ``events.jsonl``. A line that is not a JSON object with an ``event``
    raises ValueError, unless ``torn_ok`` (a reader of a run that may still be writing, or
    whose coordinator died mid-line): then it is skipped."""
    found = []
    with path.open(encoding="utf-8", errors="replace") as handle:
        for number, line in enumerate(handle, 1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except ValueError:
                if torn_ok:
                    continue
                raise
            if isinstance(record, dict) and "event" in record:
                found.append(record)
            elif not torn_ok:
                raise ValueError(f"{path}:{number}: not an event: {line[:80]!r}")
    return found


def read_logged(path: Path, *, torn_ok: bool = False,
                only: Collection[type[Event]] | None = None) -> list[Logged]:
    """The events of an ``events.jsonl``, typed: every one, or ``only`` those of these types
    (reading a long run's progress reports costs time); ``torn_ok`` as for :func:`read_events`,
    and then a record that does not fit its type is skipped too. Raises ValueError otherwise."""
    names = None if only is None else {kind.NAME for kind in only}
    logged = []
    for record in read_events(path, torn_ok=torn_ok):
        if names is not None and record["event"] not in names:
            continue
        try:
            logged.append(parse(record))
        except ValueError:
            if not torn_ok:
                raise
    return logged
