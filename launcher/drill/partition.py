"""``partition:host:NAME``: cut a network-namespace host off the network, then heal it.

The host's address (``hosts.NAME.address`` in the spec) is looked up among this machine's network
namespaces (``ip netns``); the link that holds it inside its namespace goes down, which cuts the host
off from every other host and from the coordinator at once, as a failed switch port would. The link
comes back up after ``heal_after_s`` (by default just over ``health.heartbeat_timeout_s``: the
coordinator has declared the host lost by then, and its restart can reach the host again), and
whatever is still cut when the drill ends is healed then. Needs root, and hosts that are network
namespaces here (``tests/netns``, or containers' namespaces registered with ``ip netns``); anything
else is refused before the drill starts, saying why.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import threading
from dataclasses import dataclass, field

from launcher.errors import TfclusterError

_IP_TIMEOUT_S = 10.0


class PartitionError(TfclusterError):
    """A host cannot be partitioned here (not root, no ``ip``, not a namespace host)."""


@dataclass(frozen=True)
class NamespaceLink:
    namespace: str
    device: str


def _ip(*args: str) -> str:
    done = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=_IP_TIMEOUT_S,
                          check=False)
    if done.returncode != 0:
        raise PartitionError(f"ip {' '.join(args)}: {done.stderr.strip() or 'failed'}")
    return done.stdout


def set_link(link: NamespaceLink, *, up: bool) -> None:
    """Bring ``link`` up or down inside its namespace (raises PartitionError if ``ip`` fails)."""
    _ip("-n", link.namespace, "link", "set", link.device, "up" if up else "down")


def find_link(address: str) -> NamespaceLink | None:
    """The namespace and link holding ``address``, if a network namespace here has it."""
    for line in _ip("netns", "list").splitlines():
        if not line.split():
            continue
        namespace = line.split()[0]
        for entry in _ip("-n", namespace, "-o", "-4", "addr", "show").splitlines():
            fields = entry.split()
            if len(fields) >= 4 and fields[2] == "inet" and fields[3].split("/")[0] == address:
                return NamespaceLink(namespace, fields[1].split("@")[0])
    return None


def locate(host: str, address: str | None) -> NamespaceLink:
    """Where ``host`` can be cut off, or a :class:`PartitionError` saying why it cannot."""
    if address is None:
        raise PartitionError(f"partition:host:{host}: the host has no address in the spec (a "
                             "partition cuts a remote host off)")
    if os.geteuid() != 0 or shutil.which("ip") is None:
        raise PartitionError(f"partition:host:{host}: needs root and iproute2 ('ip') on this "
                             "machine")
    found = find_link(address)
    if found is None:
        raise PartitionError(f"partition:host:{host}: no network namespace here holds {address}; "
                             "partitions work on network-namespace hosts only (e.g. tests/netns)")
    return found


@dataclass
class NamespacePartitioner:
    """Cuts hosts off by their links (see the module) and heals each after ``heal_after_s``."""

    links: dict[str, NamespaceLink]
    heal_after_s: float
    _cut: set[str] = field(default_factory=set)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _timers: list[threading.Timer] = field(default_factory=list)

    def cut(self, host: str) -> str:
        link = self.links[host]
        with self._lock:
            set_link(link, up=False)
            self._cut.add(host)
        timer = threading.Timer(self.heal_after_s, self.heal, (host,))
        timer.daemon = True
        timer.start()
        self._timers.append(timer)
        return f"{link.namespace}/{link.device} down for {self.heal_after_s:g} s"

    def heal(self, host: str) -> None:
        """Bring ``host``'s link back up; safe to call more than once."""
        with self._lock:
            if host not in self._cut:
                return
            link = self.links[host]
            set_link(link, up=True)
            self._cut.discard(host)

    def heal_all(self) -> None:
        for timer in self._timers:
            timer.cancel()
        for host in list(self._cut):
            self.heal(host)
