"""The agent's messages to the coordinator: a bounded queue, written without ever blocking.

The agent must go on reaping, heart-beating and obeying commands however slowly the coordinator
reads (or an SSH connection drains), so it never writes to it directly: :meth:`Outbox.put` queues
a message and :meth:`Outbox.write` sends what the pipe takes *now* (the fd is non-blocking; the
agent calls it again when its selector says the fd is writable).

- **Control messages** (every type but ``Output``: hello, started, exited, heartbeat, terminated,
  report, progress, agent_error) go out before any queued ``Output`` and are never dropped. A
  ``Heartbeat`` that is still queued is replaced by a newer one, and so is a task's ``Progress``
  while the pipe to the coordinator is backed up: after a stall the coordinator gets the current
  state, not a backlog of stale ones (otherwise every report goes: each carries metrics). The
  newer ``Progress`` says how many reports it replaced (``replaced_reports``), which the
  coordinator counts as dropped.
- **Routine messages wait a little**: heartbeats and progress (but never a task's first step of
  an attempt, which times a restart) are held up to :data:`ROUTINE_HOLD_S` while nothing else is
  queued, so that the coordinator wakes once for many tasks' steps instead of once per step (64
  tasks reporting every second cost it most of its CPU that way). Any other message takes them
  along at once, in order.
- **Output** is bounded to :data:`OUTPUT_LIMIT_BYTES`. A line that does not fit is dropped and
  counted, and a notice per task and stream takes its place once the queue is half empty again.
- **A task's Exited follows its output**: when it is queued, every ``Output`` of that task still
  waiting (and the notice of its lines dropped here) moves ahead of it, so all a task wrote before
  dying arrives before its exit, while other tasks' output waits behind.
"""

from __future__ import annotations

import os
import select
import time
from collections import deque
from dataclasses import dataclass, replace

from worker.agent.output_budget import MIB, drop_notice
from worker.wire.protocol import Exited, Heartbeat, Message, Output, Progress

OUTPUT_LIMIT_BYTES = 8 * MIB
#: Queued messages are joined into writes of about this size.
WRITE_CHUNK_BYTES = 64 * 1024
#: Longest a routine message (heartbeat, progress) waits for company before it is written.
ROUTINE_HOLD_S = 0.1
_SLOW_READER = "the coordinator read more slowly than the tasks wrote"


@dataclass
class _Entry:
    data: bytes
    task: str | None = None
    stream: str = ""
    key: tuple[str, str] | None = None  # set for messages that a newer one replaces
    live: bool = True
    reports: int = 0  # a Progress: the reports it stands for (itself and those it replaced)


def _replacement_key(message: Message) -> tuple[str, str] | None:
    if isinstance(message, Heartbeat):
        return ("heartbeat", "")
    if isinstance(message, Progress):
        return ("progress", message.task)
    return None


class Outbox:
    """Messages waiting for the coordinator, written to ``fd`` (made non-blocking here)."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        os.set_blocking(fd, False)
        self.broken = False  # the coordinator's end is closed: nothing more will be written
        self._control: deque[_Entry] = deque()
        self._output: deque[_Entry] = deque()
        self._output_bytes = 0
        self._latest: dict[tuple[str, str], _Entry] = {}
        self._dropped: dict[tuple[str, str], list[int]] = {}  # (task, stream) -> [lines, bytes]
        self._sending = memoryview(b"")
        self._reported: set[str] = set()  # tasks whose first Progress of the attempt is queued
        #: Since when only routine messages are queued (time.monotonic()); None: not only those.
        self._routine_since: float | None = None

    def new_attempt(self, task: str | None = None) -> None:
        """The next attempt's tasks (the same names), or ``task`` alone started again, report
        their first steps afresh."""
        if task is None:
            self._reported.clear()
        else:
            self._reported.discard(task)

    def put(self, message: Message) -> None:
        """Queue ``message``; it goes out with the next :meth:`write`. Never blocks."""
        if self.broken:
            return
        if isinstance(message, Output):
            self._put_output(_Entry(message.encode(), message.task, message.stream))
            return
        if isinstance(message, Exited):
            self._move_ahead(message.task)
        key = _replacement_key(message)
        if isinstance(message, Progress) and message.task not in self._reported:
            self._reported.add(message.task)
            key = None  # a task's first step is never replaced: it tells where the task began
        older = None if key is None else self._latest.get(key)
        # a report carries metrics: replaced only when the coordinator's end is backed up
        if older is not None and not (self._sending or isinstance(message, Heartbeat)):
            older = None
        if older is not None and isinstance(message, Progress):
            message = replace(message, replaced_reports=message.replaced_reports + older.reports)
        entry = _Entry(message.encode(), key=key, reports=1 + message.replaced_reports
                       if isinstance(message, Progress) else 0)
        if entry.key is not None:
            if older is not None:
                older.live = False
            self._latest[entry.key] = entry
            if not self._control:
                self._routine_since = time.monotonic()
        else:
            self._routine_since = None
        self._control.append(entry)

    def pending(self) -> bool:
        """Whether anything is to be written now (routine messages being held are not)."""
        return not self.broken and bool(self._sending or self._output or
                                        (self._control and not self._holding()))

    def due_at(self) -> float | None:
        """When the routine messages being held must go (time.monotonic()); None if none are."""
        if self.broken or self._sending or self._output or not self._control or \
                self._routine_since is None:
            return None
        return self._routine_since + ROUTINE_HOLD_S

    def write(self, hold: bool = True) -> None:
        """Write as much as the fd takes now; sets :attr:`broken` if the reader is gone.
        ``hold``: keep routine messages back for up to ROUTINE_HOLD_S (see the module)."""
        while not self.broken:
            if not self._sending and ((hold and self._holding()) or not self._fill()):
                return
            try:
                written = os.write(self.fd, self._sending)
            except BlockingIOError:
                return
            except OSError:  # EPIPE: nobody reads any more
                self.broken = True
                self._control.clear()
                self._output.clear()
                self._sending = memoryview(b"")
                return
            self._sending = self._sending[written:]

    def flush(self, timeout_s: float) -> bool:
        """Block up to ``timeout_s`` to write everything (at exit); True if all went out."""
        deadline = time.monotonic() + timeout_s
        poller = select.poll()
        poller.register(self.fd, select.POLLOUT)
        while True:
            self.write(hold=False)
            left = deadline - time.monotonic()
            if not self.pending() or left <= 0:
                return not self.pending()
            poller.poll(left * 1000)

    # --- internals --------------------------------------------------------------------------

    def _put_output(self, entry: _Entry) -> None:
        self._tell_drops()
        if self._output_bytes + len(entry.data) > OUTPUT_LIMIT_BYTES:
            counts = self._dropped.setdefault((entry.task or "", entry.stream), [0, 0])
            counts[0] += 1
            counts[1] += len(entry.data)
            return
        self._output.append(entry)
        self._output_bytes += len(entry.data)

    def _tell_drops(self) -> None:
        """Queue a notice for each stream that lost lines here, once there is room again."""
        if not self._dropped or self._output_bytes > OUTPUT_LIMIT_BYTES // 2:
            return
        for (task, stream), (lines, nbytes) in self._dropped.items():
            notice = drop_notice(task, stream, source=stream, lines=lines, nbytes=nbytes,
                                 why=_SLOW_READER)
            self._output.append(_Entry(notice.encode(), task, stream))
            self._output_bytes += len(self._output[-1].data)
        self._dropped.clear()

    def _move_ahead(self, task: str) -> None:
        """Move ``task``'s queued output (and notices of its drops) into the control queue."""
        staying: deque[_Entry] = deque()
        for entry in self._output:
            if entry.task == task:
                self._control.append(entry)
                self._output_bytes -= len(entry.data)
            else:
                staying.append(entry)
        self._output = staying
        for stream_key in [k for k in self._dropped if k[0] == task]:
            lines, nbytes = self._dropped.pop(stream_key)
            notice = drop_notice(task, stream_key[1], source=stream_key[1], lines=lines,
                                 nbytes=nbytes, why=_SLOW_READER)
            self._control.append(_Entry(notice.encode(), task, stream_key[1]))

    def _holding(self) -> bool:
        due = self.due_at()
        return due is not None and time.monotonic() < due

    def _fill(self) -> bool:
        """Take the next messages, control first, into one buffer; False if there are none."""
        self._tell_drops()
        chunks: list[bytes] = []
        size = 0
        while self._control and size < WRITE_CHUNK_BYTES:
            entry = self._control.popleft()
            if entry.key is not None and self._latest.get(entry.key) is entry:
                del self._latest[entry.key]
            if entry.live:
                chunks.append(entry.data)
                size += len(entry.data)
        if not self._control:
            self._routine_since = None
        while self._output and size < WRITE_CHUNK_BYTES:
            entry = self._output.popleft()
            self._output_bytes -= len(entry.data)
            chunks.append(entry.data)
            size += len(entry.data)
        self._sending = memoryview(b"".join(chunks))
        return bool(chunks)
