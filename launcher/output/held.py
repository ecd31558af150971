"""Task output held back a moment before it is shown, so that a failure can silence the rest.

When one task of an MWMS job dies, the others print about it at once (an aborted collective, a
traceback of the ``UnavailableError``), and those lines reach the coordinator about as fast as
the news of the death itself: shown as they come, they stand *before* the root cause. So the
console keeps each task line for :attr:`HeldLines.hold_s` before it shows it; when tfcluster
learns of a failure it calls :meth:`HeldLines.mute` naming the failed task: the other tasks'
held lines, which arrived around the failure (a survivor's first reaction can come before the
agent has even reaped the dead task), are withdrawn, and every line after it is dropped (and
counted) until :meth:`HeldLines.unmute`. The failed task's own last words are shown. The task
logs have every line either way: this is only what is shown.

With ``hold_s == 0`` lines are shown at once (tests, and consoles that show no task output).
Thread-safe: lines come from each agent's reader thread, mute from the attempt's loop; ``show``
is called with this object's lock held, so lines are shown in the order they arrived.
"""

from __future__ import annotations

import collections
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

Show = Callable[[str, str], None]


@dataclass(frozen=True)
class _Line:
    task: str
    line: str
    arrived: float


class HeldLines:
    def __init__(self, show: Show, hold_s: float,
                 clock: Callable[[], float] = time.time) -> None:
        self.hold_s = hold_s
        self._show = show
        self._clock = clock
        self._held: collections.deque[_Line] = collections.deque()
        self._cond = threading.Condition()
        self._muted = False
        self._closed = False
        #: Lines not shown per task since the last :meth:`mute` (withdrawn or dropped).
        self._unshown: collections.Counter[str] = collections.Counter()
        self._thread: threading.Thread | None = None

    @property
    def muted(self) -> bool:
        return self._muted

    def add(self, task: str, line: str) -> None:
        with self._cond:
            if self._muted:
                self._unshown[task] += 1
                return
            if self.hold_s <= 0 or self._closed:
                self._show(task, line)
                return
            self._held.append(_Line(task, line, self._clock()))
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="held-lines",
                                                daemon=True)
                self._thread.start()
            self._cond.notify()

    def release(self) -> None:
        """Show every held line now (before one of tfcluster's own messages)."""
        with self._cond:
            self._show_until(None)

    def mute(self, failed: str) -> None:
        """Show the held lines of the ``failed`` task, withdraw every other task's, and show no
        more lines. Safe to repeat."""
        with self._cond:
            if self._muted:
                return
            kept = [held for held in self._held if held.task == failed]
            for held in self._held:
                if held.task != failed:
                    self._unshown[held.task] += 1
            self._held.clear()
            for held in kept:
                self._show(held.task, held.line)
            self._muted = True

    def unmute(self) -> dict[str, int]:
        """Show lines again; how many were not shown per task since :meth:`mute`."""
        with self._cond:
            self._muted = False
            unshown, self._unshown = dict(self._unshown), collections.Counter()
            return unshown

    def close(self) -> None:
        """Show what is held and stop the thread; lines added later are shown at once."""
        with self._cond:
            self._show_until(None)
            self._closed = True
            self._cond.notify_all()

    def _show_until(self, now: float | None) -> None:
        """Show held lines that are due at ``now`` (all of them for None); lock held."""
        while self._held and (now is None or self._held[0].arrived + self.hold_s <= now):
            held = self._held.popleft()
            self._show(held.task, held.line)

    def _run(self) -> None:
        with self._cond:
            while not self._closed:
                if not self._held:
                    self._cond.wait()
                    continue
                wait = self._held[0].arrived + self.hold_s - self._clock()
                if wait > 0:
                    self._cond.wait(wait)
                    continue
                self._show_until(self._clock())
