"""``lose-host:NAME[:TRIGGER]`` and ``heal:NAME:after=SECONDS``: a host taken away for good, and
given back.

Unlike ``partition`` (whose link comes back once the coordinator has declared the host lost), a
lost host stays unreachable until a ``heal`` fault names it, ``SECONDS`` after the loss took effect
(on a timer of its own: also while no attempt runs, e.g. while the coordinator waits for hosts to
return), or until the drill ends: then every host still lost is given back, so that nothing is
left broken, also when the job failed. Two kinds of hosts can be lost:

- a network-namespace host (``tests/netns``; the same lookup as :mod:`launcher.drill.partition`:
  the namespace holding the host's address): its link goes down, and comes back up;
- a node of the Slurm allocation the job runs on (the spec's engine is Slurm): its agent step is
  killed and the node drained, then resumed (the engine's ``locate_lost_host``,
  :mod:`launcher.backends.slurm.node_loss`); while it is lost, any agent step started there
  again is killed too (every :data:`WATCH_S` seconds).

Anything else is refused before the drill starts, one line per host saying why
(:func:`locate_losses`); so is a drill not run as root.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from launcher.backends import host_loss_for
from launcher.drill.faults import Action, Fault
from launcher.drill.partition import NamespaceLink, find_link, set_link
from launcher.errors import TfclusterError
from launcher.spec.model import ClusterSpec

#: How often a lost Slurm node is looked at again for agent steps to kill, seconds.
WATCH_S = 1.0


class HostLossError(TfclusterError):
    """Hosts that cannot be lost here, one line each saying why."""


class LosableHost(Protocol):
    """One host the drill can take away and give back."""

    def take_down(self) -> str:
        """Make the host unreachable; what was done (for the report). Raises TfclusterError."""

    def enforce(self) -> list[str]:
        """Undo whatever brought a lost host back since (called again and again while it is
        lost); what was undone."""

    def bring_back(self) -> str:
        """Make the host reachable again; what was done. Safe to call more than once."""


@dataclass(frozen=True)
class NamespaceHostLoss:
    """A network-namespace host: its link down, then up."""

    link: NamespaceLink

    def take_down(self) -> str:
        set_link(self.link, up=False)
        return f"{self.link.namespace}/{self.link.device} down until healed"

    def enforce(self) -> list[str]:
        return []  # nothing but the drill brings the link up

    def bring_back(self) -> str:
        set_link(self.link, up=True)
        return f"{self.link.namespace}/{self.link.device} up"


@dataclass(frozen=True)
class Machine:
    """What :func:`locate_losses` asks of this machine (tests give their own)."""

    euid: Callable[[], int] = os.geteuid
    has_ip: Callable[[], bool] = lambda: shutil.which("ip") is not None
    find_link: Callable[[str], NamespaceLink | None] = find_link
    environ: Mapping[str, str] = field(default_factory=lambda: os.environ)
    #: How a scheduler's commands are run (None: the engine's own way).
    run: Callable[[Sequence[str]], str] | None = None


def _locate(spec: ClusterSpec, host: str, machine: Machine) -> LosableHost:
    locate = host_loss_for(spec)
    if locate is not None:  # the engine knows how to take its hosts away (a Slurm node)
        if machine.run is None:
            return locate(host, spec.name, machine.environ)
        return locate(host, spec.name, machine.environ, machine.run)
    if host not in spec.hosts:
        declared = ", ".join(spec.hosts) or "none"
        raise HostLossError(f"no host {host!r} under the spec's hosts (hosts: {declared})")
    if not machine.has_ip():
        raise HostLossError("needs iproute2 ('ip') on this machine")
    address = spec.address_of(host)
    link = machine.find_link(address)
    if link is None:
        raise HostLossError(f"no network namespace here holds {address}; lose-host works on "
                            "network-namespace hosts (e.g. tests/netns) and on the nodes of the "
                            "Slurm allocation a Slurm spec runs on")
    return NamespaceHostLoss(link)


def locate_losses(spec: ClusterSpec, faults: Sequence[Fault],
                  machine: Machine | None = None) -> dict[str, LosableHost]:
    """How each host a ``lose-host`` fault names can be taken away; a :class:`HostLossError`
    (before anything runs), one line per host that cannot, saying why. Changes nothing."""
    machine = machine or Machine()
    hosts = list(dict.fromkeys(f.target.name for f in faults if f.action is Action.LOSE_HOST))
    if hosts and machine.euid() != 0:
        raise HostLossError("\n".join(f"lose-host:{h}: needs root (to take a host's link down or "
                                      "drain a Slurm node)" for h in hosts))
    found: dict[str, LosableHost] = {}
    problems = []
    for host in hosts:
        try:
            found[host] = _locate(spec, host, machine)
        except TfclusterError as exc:
            problems.append(f"lose-host:{host}: {exc}")
    if problems:
        raise HostLossError("\n".join(problems))
    return found


@dataclass(frozen=True)
class Healed:
    """A host given back by its ``heal`` timer (``ok``: it came back; else ``detail`` says why
    not), at ``at`` (wall clock)."""

    host: str
    at: float
    detail: str
    ok: bool = True


@dataclass
class HostLosses:
    """Takes hosts away and gives them back (see the module). Every method may be called from any
    thread; :meth:`restore_all` is safe to call more than once."""

    hosts: Mapping[str, LosableHost]
    watch_s: float = WATCH_S
    _lost: set[str] = field(default_factory=set)
    _healed: list[Healed] = field(default_factory=list)
    _timers: list[threading.Timer] = field(default_factory=list)
    _state: threading.Lock = field(default_factory=threading.Lock)  # the fields above
    _acting: threading.Lock = field(default_factory=threading.Lock)  # one host change at a time
    _stop: threading.Event = field(default_factory=threading.Event)
    _watcher: threading.Thread | None = None

    def lose(self, host: str) -> str:
        """Take ``host`` away; what was done. Raises TfclusterError if it cannot be."""
        with self._acting:
            if self._stop.is_set():
                raise HostLossError(f"lose-host:{host}: the drill is over")
            with self._state:
                # before taking it down: a host half taken down (a Slurm node drained, its
                # steps not killed yet) is given back at the end too
                self._lost.add(host)
            detail = self.hosts[host].take_down()
            with self._state:
                if self._watcher is None:
                    self._watcher = threading.Thread(target=self._watch, daemon=True,
                                                     name="tfcluster-drill-host-loss")
                    self._watcher.start()
        return detail

    def heal_after(self, host: str, after_s: float) -> None:
        """Give ``host`` back ``after_s`` seconds from now (see :meth:`healed`)."""
        timer = threading.Timer(after_s, self._heal, (host,))
        timer.daemon = True
        with self._state:
            if self._stop.is_set():
                return
            self._timers.append(timer)
        timer.start()

    def healed(self) -> list[Healed]:
        """The heals done by :meth:`heal_after`'s timers since the last call."""
        with self._state:
            done, self._healed = self._healed, []
        return done

    def is_lost(self, host: str) -> bool:
        with self._state:
            return host in self._lost

    def _heal(self, host: str) -> None:
        at = time.time()
        try:
            detail = self._bring_back(host)
        except TfclusterError as exc:
            with self._state:
                self._healed.append(Healed(host, at, str(exc), ok=False))
            return
        if detail is not None:
            with self._state:
                self._healed.append(Healed(host, at, detail))

    def _bring_back(self, host: str) -> str | None:
        with self._acting:
            if not self.is_lost(host):
                return None
            detail = self.hosts[host].bring_back()
            with self._state:
                self._lost.discard(host)
            return detail

    def _watch(self) -> None:
        while not self._stop.wait(self.watch_s):
            for host in sorted(self.hosts):
                with self._acting:
                    if not self.is_lost(host):
                        continue
                    # a Slurm command that failed (slurmctld busy) is tried again next round
                    with contextlib.suppress(TfclusterError):
                        self.hosts[host].enforce()

    def restore_all(self) -> list[str]:
        """Stop every timer and give back every host still lost; one line per host that could
        not be given back (each is tried)."""
        with self._state:
            self._stop.set()
            timers, watcher = list(self._timers), self._watcher
        for timer in timers:
            timer.cancel()
        if watcher is not None:
            watcher.join(timeout=self.watch_s + 35.0)  # at most one Slurm command late
        problems = []
        for host in sorted(self.hosts):
            try:
                self._bring_back(host)
            except TfclusterError as exc:
                problems.append(f"{host} could not be given back: {exc}")
        return problems


def restore_or_say(losses: HostLosses) -> None:
    """:meth:`HostLosses.restore_all`, saying on stderr what is still broken (never raising: it
    runs while a job's own error may be on its way out)."""
    for problem in losses.restore_all():
        print(f"tfcluster drill: {problem}", file=sys.stderr, flush=True)
