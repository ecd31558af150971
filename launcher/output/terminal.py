"""Writing to the user's terminal (or pipe) without ever making the caller wait.

A job must never be harmed by where its output goes: a pager, Ctrl-S, a slow ``tee`` or
``| head -2``. Each stream gets a :class:`StreamWriter`: callers hand it text, which goes into a
bounded queue; one daemon thread writes it out with plain ``os.write`` on the stream's file
descriptor (no Python buffer lock is held while it waits, so a stuck write can never block the
interpreter's exit). When the reader cannot keep up, droppable text (task output) is dropped and
counted once the queue is full, and a notice says how much was skipped; tfcluster's own messages
have more room. When the reader is gone (EPIPE, EIO), the writer stops echoing and the job goes on.
The task logs in the run directory keep every line either way.

Streams without a file descriptor (a ``StringIO`` in tests) cannot block and are written directly.
"""

from __future__ import annotations

import collections
import contextlib
import io
import os
import threading
import time
from typing import TextIO

#: Text queued for one stream before droppable text is dropped, bytes.
MAX_QUEUED_BYTES = 4 * 1024 * 1024
#: Extra room for text that is not droppable (tfcluster's own messages), bytes.
MAX_PRIORITY_BYTES = 4 * 1024 * 1024
#: How long :meth:`StreamWriter.close` waits for queued text to go out (a slow reader).
CLOSE_WAIT_S = 2.0


def _fd_of(stream: TextIO) -> int | None:
    try:
        return stream.fileno()
    except (OSError, ValueError, io.UnsupportedOperation):
        return None


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]


class StreamWriter:
    def __init__(self, stream: TextIO, *, max_bytes: int = MAX_QUEUED_BYTES,
                 max_priority_bytes: int = MAX_PRIORITY_BYTES) -> None:
        self.stream = stream
        self._fd = _fd_of(stream)
        self._max = max_bytes
        self._max_priority = max_priority_bytes
        self._queue: collections.deque[bytes] = collections.deque()
        self._queued = 0
        self._cond = threading.Condition()
        self._writing = False
        self._closed = False
        #: The reader went away (EPIPE, EIO): nothing more is written.
        self.broken = False
        #: Droppable lines dropped so far, and those not yet announced.
        self.dropped = 0
        self._unannounced = 0
        self._thread: threading.Thread | None = None
        if self._fd is not None:
            with contextlib.suppress(OSError, ValueError):
                stream.flush()  # anything printed before us goes first
            self._thread = threading.Thread(target=self._run, args=(self._fd,),
                                            name="terminal", daemon=True)
            self._thread.start()

    def write(self, text: str, *, droppable: bool = False) -> None:
        """Queue ``text``; never blocks. Droppable text is dropped when the queue is full."""
        if self._fd is None:
            self.stream.write(text)
            self.stream.flush()
            return
        data = text.encode("utf-8", "replace")
        with self._cond:
            if self.broken or self._closed:
                return
            limit = self._max if droppable else self._max + self._max_priority
            if self._queued + len(data) > limit:
                if droppable:
                    self.dropped += text.count("\n") or 1
                    self._unannounced += text.count("\n") or 1
                return
            self._queue.append(data)
            self._queued += len(data)
            self._cond.notify()

    def _run(self, fd: int) -> None:
        while True:
            with self._cond:
                while not self._queue and not self._closed:
                    self._cond.wait()
                if not self._queue:
                    return
                data = self._queue.popleft()
                self._writing = True
                notice = self._take_notice() if not self._queue else None
            try:
                _write_all(fd, data)
                if notice:
                    _write_all(fd, notice)
            except OSError:  # EPIPE, EIO: the reader is gone; the job goes on
                with self._cond:
                    self.broken = True
                    self._queue.clear()
                    self._queued = 0
                    self._writing = False
                    self._cond.notify_all()
                return
            with self._cond:
                self._queued -= len(data)
                self._writing = False
                self._cond.notify_all()

    def _take_notice(self) -> bytes | None:
        """Once the queue has drained after drops: one line saying how much was skipped."""
        if not self._unannounced:
            return None
        count, self._unannounced = self._unannounced, 0
        return (f"tfcluster: ... {count} line(s) of task output not shown here (the terminal "
                "could not keep up); the task logs in the run directory have every line\n"
                ).encode()

    def flush(self, timeout_s: float) -> bool:
        """Wait up to ``timeout_s`` for everything queued to be written; True if it was."""
        deadline = time.monotonic() + timeout_s
        with self._cond:
            while (self._queue or self._writing) and not self.broken:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._cond.wait(left)
        return True

    def close(self, timeout_s: float = CLOSE_WAIT_S) -> None:
        """Write out what is queued (up to ``timeout_s``), then stop the thread. Safe to call
        more than once; text written afterwards is dropped."""
        if self._fd is None:
            return
        self.flush(timeout_s)
        with self._cond:
            if self._unannounced and not self.broken:
                notice = self._take_notice()
                if notice:
                    self._queue.append(notice)
            self._closed = True
            self._cond.notify_all()
        self.flush(timeout_s)


class WriterFile(io.TextIOBase):
    """A file-like view of a :class:`StreamWriter` for rich's live display (droppable)."""

    def __init__(self, writer: StreamWriter) -> None:
        super().__init__()
        self._writer = writer

    def write(self, text: str) -> int:
        self._writer.write(text, droppable=True)
        return len(text)

    def flush(self) -> None:
        return None

    def isatty(self) -> bool:
        return self._writer.stream.isatty()

    def fileno(self) -> int:
        return self._writer.stream.fileno()
