"""The coordinator's half of the version check (:mod:`worker.wire.handshake`): an agent whose first
message, its ``hello``, announces another tfcluster or protocol version than the coordinator's is
never sent a launch; the run stops with one line naming the host, both versions and what to do."""

from __future__ import annotations

from launcher.errors import AgentStartError
from worker.wire.handshake import OURS, Versions, mismatch
from worker.wire.protocol import Hello
from worker.wire.version import TFCLUSTER_VERSION


class VersionMismatch(AgentStartError):
    """``host``'s agent runs another tfcluster version than the coordinator: the run cannot go on
    there, and stops (a restart would meet the same agent)."""

    def __init__(self, host: str, theirs: Versions) -> None:
        self.theirs = theirs
        super().__init__(host, f"{theirs} there, but the coordinator runs {OURS}",
                         f"install tfcluster {TFCLUSTER_VERSION} on {host}, or point the spec's "
                         "'python' at an interpreter that has it")


def check_first_line(host: str, line: bytes) -> VersionMismatch | None:
    """The error to stop the run with when ``line``, an agent's first, is a hello from another
    version; None when it is ours (or not a hello: decoding it says what it is)."""
    theirs = mismatch(line, Hello.TYPE)
    return None if theirs is None else VersionMismatch(host, theirs)
