"""Splitting a byte stream into lines, with a bound on how long one line may grow."""

from __future__ import annotations


class LineBuffer:
    """Turns chunks of a byte stream into whole lines (bytes, without the line ending).

    ``limit`` bounds the memory one line may take: a longer line is *cut* into pieces of ``limit``
    bytes (task output: every byte is still shown), or with ``cut=False`` *dropped* whole and
    counted in :attr:`overlong` (report lines, which mean nothing in pieces). ``limit=None`` keeps
    every line whole (the coordinator's commands).
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

    def _take(self, lines: list[bytes], raw: bytearray) -> None:
        if raw.endswith(b"\r"):
            raw = raw[:-1]
        if self.limit is None or len(raw) <= self.limit:
            lines.append(bytes(raw))
        elif self.cut:
            lines.extend(bytes(raw[i:i + self.limit]) for i in range(0, len(raw), self.limit))
        else:
            self.overlong += 1
