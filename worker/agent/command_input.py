"""The coordinator's commands as the agent reads them: JSON lines on its stdin, the first one a
:class:`~worker.wire.protocol.Launch` (read blocking, before the agent's loop starts), the rest read
as they come, without ever blocking the loop. EOF means the coordinator is gone."""

from __future__ import annotations

import os

from worker.agent.lines import LineBuffer
from worker.wire.handshake import OURS, Versions, mismatch
from worker.wire.protocol import Launch, ProtocolError, decode_command

_CHUNK_BYTES = 65536


class LaunchRefused(ProtocolError):
    """The first launch comes from another tfcluster version (its raw fields say so)."""

    def __init__(self, theirs: Versions) -> None:
        self.theirs = theirs
        super().__init__(f"launch refused: {OURS} here, {theirs} on the coordinator (install the "
                         "coordinator's tfcluster version on this host, or point the spec's "
                         "'python' at an interpreter that has it)")


class CommandInput:
    """The command lines of one file descriptor (the agent's stdin)."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self._lines = LineBuffer(limit=None)  # a launch may be large: never cut a command

    def first_launch(self) -> tuple[Launch, list[bytes]] | None:
        """Block until the first line: (the launch message, any later lines read along with it);
        None on EOF before it; LaunchRefused if it is a launch of another tfcluster version (its
        versions are read before the rest, which may not parse), ProtocolError if it is not a
        launch."""
        lines: list[bytes] = []
        while not lines:
            chunk = os.read(self.fd, _CHUNK_BYTES)
            if not chunk:
                return None
            lines = self._lines.feed(chunk)
        theirs = mismatch(lines[0], Launch.TYPE)
        if theirs is not None:
            raise LaunchRefused(theirs)
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
