"""The address by which other hosts reach this machine, for local tasks of a multi-host job."""

from __future__ import annotations

import contextlib
import socket


def address_towards(remote: str, port: int = 22) -> str | None:
    """The local IP the kernel would use to reach ``remote`` (a UDP ``connect`` only looks up the
    route; no packet is sent). None when ``remote`` cannot be resolved or routed."""
    with contextlib.suppress(OSError):
        family, _, _, _, sockaddr = socket.getaddrinfo(remote, port, type=socket.SOCK_DGRAM)[0]
        with socket.socket(family, socket.SOCK_DGRAM) as probe:
            probe.connect(sockaddr)
            return str(probe.getsockname()[0])
    return None
