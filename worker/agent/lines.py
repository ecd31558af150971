"""Splitting a byte stream into lines, with a bound on how long one line may grow.

A carriage return that does not end a line (``\\r`` then more text) starts the line over, as it
does on a terminal: a progress bar (Keras ``fit``, tqdm) that redraws itself a thousand times an
epoch becomes *one* line holding its last state, instead of one 75 KB line of every state. What
came before the last ``\\r`` is dropped as it comes, so a redrawn line takes no more memory than
one state of it.
"""

from __future__ import annotations


class LineBuffer:
    """Turns chunks of a byte stream into whole lines (bytes, without the line ending).

    ``limit`` bounds the memory one line may take: a longer line is *cut* into pieces of ``limit``
    bytes (task output: every byte is still shown), or with ``cut=False`` *dropped* whole and
    counted in :attr:`overlong` (report lines, which mean nothing in pieces). ``limit=None`` keeps
    every line whole (the coordinator's commands). A line is its text after its last carriage
    return (a trailing ``\\r``, as in ``\\r\\n``, only ends it); JSON lines never hold a raw
    ``\\r``, so this changes nothing for reports and commands.
    """

    def __init__(self, limit: int | None, *, cut: bool = True) -> None:
        self.limit = limit
        self.cut = cut
        self.overlong = 0  # lines dropped for being longer than the limit (cut=False)
        self._pending = bytearray()
        self._skipping = False  # inside a dropped overlong line, until its newline

    def feed(self, chunk: bytes) -> list[bytes]:
        """The lines that ``chunk`` completes, in order."""
        lines: list[bytes] = []
        start = 0
        if self._skipping:
            newline = chunk.find(b"\n")
            if newline < 0:
                return lines
            self._skipping = False
            start = newline + 1
        scanned = len(self._pending)  # what was kept last time holds no newline
        self._pending += memoryview(chunk)[start:]
        start = 0
        while True:
            newline = self._pending.find(b"\n", max(start, scanned))
            if newline < 0:
                break
            self._take(lines, self._pending[start:newline])
            start = newline + 1
        del self._pending[:start]
        self._drop_redrawn()
        if self.limit is not None and len(self._pending) > self.limit:
            if self.cut:
                whole = len(self._pending) - len(self._pending) % self.limit
                self._take(lines, self._pending[:whole])
                del self._pending[:whole]
            else:
                self.overlong += 1
                self._skipping = True
                self._pending.clear()
        return lines

    def flush(self) -> list[bytes]:
        """At end of stream: the last line, if it had no newline."""
        if not self._pending:
            return []
        lines: list[bytes] = []
        self._take(lines, self._pending)
        self._pending.clear()
        return lines

    def _drop_redrawn(self) -> None:
        """Forget what the unfinished line's last carriage return wrote over. A ``\\r`` at the
        very end is kept: it may be the first half of ``\\r\\n``, or the last state may be all
        that comes before the newline."""
        last = self._pending.rfind(b"\r", 0, max(0, len(self._pending) - 1))
        if last >= 0:
            del self._pending[:last + 1]

    def _take(self, lines: list[bytes], raw: bytearray) -> None:
        raw = _last_state(raw)
        if self.limit is None or len(raw) <= self.limit:
            lines.append(bytes(raw))
        elif self.cut:
            lines.extend(bytes(raw[i:i + self.limit]) for i in range(0, len(raw), self.limit))
        else:
            self.overlong += 1


def _last_state(raw: bytearray) -> bytearray:
    """A line as a terminal would leave it: the text after its last carriage return (trailing
    ones ignored), without the backspaces a redraw may end with (Keras' progress bar)."""
    raw = raw.rstrip(b"\r")
    last = raw.rfind(b"\r")
    if last >= 0:
        raw = raw[last + 1:]
    return raw.rstrip(b"\x08") if raw.endswith(b"\x08") else raw
