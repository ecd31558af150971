"""``events.jsonl`` read back line by line, as untrusted text: a file of any size is read in
bounded memory, and what a crash or a reboot leaves (a last line cut mid-write, a tail of NUL
bytes where the file system had allocated blocks the data never reached) is *torn*: skipped and
counted, never an error. A line that is JSON but not an event (``[1]``, an object without an
``event`` name) is not torn: it is :class:`EventLineError`, one line naming the file, the line
number and what is wrong.

:class:`EventLines` is the one reader; :func:`launcher.run.event_log.read_events` and the typed
readers are built on it.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any, BinaryIO

from worker.wire.safe_open import open_reading

#: A line longer than this is not read whole but skipped as torn: no event tfcluster writes comes
#: near it (a failure's traceback is cut to 256 KiB), and a reader's memory stays bounded.
MAX_EVENT_LINE_BYTES = 8 * 1024 * 1024
#: Most torn line numbers remembered (the count goes on).
_KEEP_TORN = 5


class EventLineError(ValueError):
    """A line of ``events.jsonl`` that is not an event: ``<file>:<line>: <what is wrong>``."""

    def __init__(self, path: Path, number: int, detail: str) -> None:
        self.path, self.number, self.detail = path, number, detail
        super().__init__(f"{path}:{number}: {detail}")


def _no_number(name: str) -> None:
    """JSON has no NaN or Infinity (an older tfcluster wrote a task's NaN loss so): null."""
    return None


def loads_record(text: str | bytes) -> Any:
    """``json.loads`` reading NaN and Infinity, which are not JSON, as null."""
    return json.loads(text, parse_constant=_no_number)


def finite(value: object) -> bool:
    """Whether ``value`` is a number JSON can hold (no NaN or infinity; not a bool)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False
    return math.isfinite(value)


class EventLines:
    """The records of one ``events.jsonl``, streamed: iterate for ``(line number, record)``.
    Torn lines are skipped and counted (:attr:`torn`, :meth:`torn_note`); a line that is JSON
    but not an event raises :class:`EventLineError` unless ``lenient`` (a reader of a run that
    may still be writing, or a person's ``status``), when it is skipped and counted too
    (:attr:`bad`). Raises OSError if the file cannot be opened or read."""

    def __init__(self, path: Path, *, lenient: bool = False) -> None:
        self.path = path
        self.lenient = lenient
        self.torn = 0
        self.torn_lines: list[int] = []
        self.bad: list[EventLineError] = []
        self.bad_count = 0

    def __iter__(self) -> Iterator[tuple[int, dict[str, Any]]]:
        with open_events(self.path) as handle:
            yield from self._records(handle)

    def _records(self, handle: BinaryIO) -> Iterator[tuple[int, dict[str, Any]]]:
        number = 0
        while True:
            raw = handle.readline(MAX_EVENT_LINE_BYTES + 1)
            if not raw:
                return
            number += 1
            if len(raw) > MAX_EVENT_LINE_BYTES and not raw.endswith(b"\n"):
                while (rest := handle.readline(MAX_EVENT_LINE_BYTES)) and \
                        not rest.endswith(b"\n"):
                    pass  # the rest of an over-long line, read and dropped
                self._torn(number)
                continue
            text = raw.replace(b"\0", b"").strip()
            if not text:
                if b"\0" in raw:  # blocks allocated, the data never written: a reboot's mark
                    self._torn(number)
                continue
            try:
                record = loads_record(text.decode("utf-8"))
            except (ValueError, RecursionError):  # cut mid-write, not UTF-8, too deep
                self._torn(number)
                continue
            if not isinstance(record, dict):
                self._bad(number, f"not an event (a JSON {type(record).__name__}, not an "
                          "object)")
                continue
            if not isinstance(record.get("event"), str):
                self._bad(number, "not an event (no 'event' name)")
                continue
            yield number, record

    def _torn(self, number: int) -> None:
        self.torn += 1
        if len(self.torn_lines) < _KEEP_TORN:
            self.torn_lines.append(number)

    def _bad(self, number: int, detail: str) -> None:
        error = EventLineError(self.path, number, detail)
        if not self.lenient:
            raise error
        self.bad_count += 1
        if len(self.bad) < _KEEP_TORN:
            self.bad.append(error)

    def torn_note(self) -> str | None:
        """One line saying which torn lines were skipped (None: there were none)."""
        if not self.torn:
            return None
        shown = ", ".join(map(str, self.torn_lines)) + (", ..." if self.torn > _KEEP_TORN else "")
        return (f"{self.path}: skipped {self.torn} torn line(s) (line {shown}: cut mid-write or "
                "padded with NUL bytes, as a crash or a reboot leaves them)")


def open_events(path: Path) -> BinaryIO:
    """``events.jsonl`` opened for reading (binary: lines are decoded one by one)."""
    return open_reading(path)  # a regular file: not through a symlink, never a FIFO
