"""The version check both ends make before anything else: the agent's ``hello`` announces its
tfcluster and protocol versions, every ``launch`` the coordinator's, and each side reads the
other's from the message's raw JSON before it parses the rest of it (a message of another version
may not parse as one of ours). Versions that differ stop the run before any task starts, with one
line saying so, instead of whatever a protocol mismatch would raise halfway through it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from worker.wire.version import PROTOCOL_VERSION, TFCLUSTER_VERSION

#: The fields of ``hello`` and ``launch`` that carry the sender's versions.
TFCLUSTER_FIELD = "tfcluster_version"
PROTOCOL_FIELD = "protocol_version"


@dataclass(frozen=True)
class Versions:
    """What one end runs; None where a message did not say (a tfcluster older than this check)."""

    tfcluster: str | None
    protocol: int | None

    def __str__(self) -> str:
        if self.tfcluster is None:
            return "a tfcluster older than the version check"
        return f"tfcluster {self.tfcluster} (protocol {self.protocol})"


#: This end's versions.
OURS = Versions(TFCLUSTER_VERSION, PROTOCOL_VERSION)


def raw_fields(line: bytes | str) -> dict[str, object] | None:
    """The JSON object on ``line``, or None if it is not one."""
    try:
        payload = json.loads(line)
    except (ValueError, UnicodeDecodeError, RecursionError):
        return None
    return payload if isinstance(payload, dict) else None


def announced(payload: dict[str, object]) -> Versions:
    """The versions a raw ``hello`` or ``launch`` object announces."""
    tfcluster = payload.get(TFCLUSTER_FIELD)
    protocol = payload.get(PROTOCOL_FIELD)
    return Versions(tfcluster if isinstance(tfcluster, str) else None,
                    protocol if isinstance(protocol, int) and not isinstance(protocol, bool)
                    else None)


def mismatch(line: bytes | str, message_type: str) -> Versions | None:
    """The versions ``line`` announces when it is a ``message_type`` message (``hello``,
    ``launch``) from another version than ours; None when it is ours, or not such a message at
    all (whatever that is, decoding it will say)."""
    payload = raw_fields(line)
    if payload is None or payload.get("type") != message_type:
        return None
    theirs = announced(payload)
    return None if theirs == OURS else theirs
