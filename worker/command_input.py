"""The coordinator's commands as the agent reads them: JSON lines on its stdin, the first one a
:class:`~worker.protocol.Launch` (read blocking, before the agent's loop starts), the rest read
as they come, without ever blocking the loop. EOF means the coordinator is gone."""

from __future__ import annotations

import os

from worker.lines import LineBuffer
from worker.protocol import Launch, ProtocolError, decode_command

_CHUNK_BYTES = 65536


class CommandInput:
    """The command lines of one file descriptor (the agent's stdin)."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self._lines = LineBuffer(limit=None)  # a launch may be large: never cut a command

    def first_launch(self) -> tuple[Launch, list[bytes]] | None:
        """Block until the first line: (the launch message, any later lines read along with it);
        None on EOF before it; ProtocolError if the first line is not a launch."""
        lines: list[bytes] = []
        while not lines:
            chunk = os.read(self.fd, _CHUNK_BYTES)
            if not chunk:
                return None
            lines = self._lines.feed(chunk)
        message = decode_command(lines[0])
        if not isinstance(message, Launch):
            raise ProtocolError(f"expected a launch message first, got {message.TYPE!r}")
        return message, lines[1:]

    def read(self) -> list[bytes] | None:
        """The whole lines that have come (after the fd was made non-blocking and reported
        readable); None at EOF."""
        try:
            chunk = os.read(self.fd, _CHUNK_BYTES)
        except BlockingIOError:
            return []
        if not chunk:
            return None
        return self._lines.feed(chunk)
