"""Network addresses: ``host:port`` text, and the address by which other hosts reach this machine.

Standard library only: the planner and the SSH layer both use it."""

from __future__ import annotations

import contextlib
import ipaddress
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


def format_address(host: str, port: int) -> str:
    """``host:port``, with brackets around an IPv6 literal."""
    try:
        if ipaddress.ip_address(host).version == 6:
            return f"[{host}]:{port}"
    except ValueError:
        pass
    return f"{host}:{port}"
