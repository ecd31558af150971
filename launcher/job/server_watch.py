"""Whether the TF servers of a parameter_server job still answer: a worker or ps whose process is
alive but whose port no longer takes a connection (a wedged gRPC server, a closed listener) is
as good as dead to the chief, whose ``ClusterCoordinator`` would wait on it.

One thread connects to every watched server's port each interval (a TCP connect, nothing
sent); a server is watched from its first answer on (TF takes seconds to import and bind), and
one that then fails :data:`MISSES` connects in a row is reported once, as :class:`ServerSilent`
on the attempt's inbox. The attempt's loop then treats it as failed (it is stopped and started
again by :mod:`launcher.job.ps_attempt`). The first answer of each start is reported too, as
:class:`ServerAnswered`: a chief started again with a ps waits for it, since a chief whose
``ClusterCoordinator`` cannot reach a ps dies of it. The coordinator must reach the servers'
addresses, which the chief, often on its host, must reach too.
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable
from dataclasses import dataclass

#: Connects in a row that must fail, after a first answer, before a server counts as silent.
MISSES = 3
#: How long one connect may take.
CONNECT_TIMEOUT_S = 1.0


@dataclass(frozen=True)
class ServerSilent:
    """``task``'s port stopped answering at ``since`` while its process ran."""

    task: str
    host: str
    since: float
    why: str


@dataclass(frozen=True)
class ServerAnswered:
    """``task``'s port took its first connection (of this start) at ``at``."""

    task: str
    at: float


@dataclass
class _Watched:
    host: str
    address: str
    port: int
    answered: bool = False
    misses: int = 0
    first_miss: float = 0.0


class ServerWatch:
    """Watches servers' ports every ``interval_s`` in a thread of its own; ``put`` receives each
    start's first :class:`ServerAnswered` and :class:`ServerSilent` (each once per start). Safe
    to call from the loop's thread."""

    def __init__(self, put: Callable[[ServerAnswered | ServerSilent], None],
                 clock: Callable[[], float],
                 interval_s: float) -> None:
        self._put = put
        self._clock = clock
        self._interval_s = interval_s
        self._watched: dict[str, _Watched] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def watch(self, task: str, host: str, address: str, port: int) -> None:
        """Watch ``task`` (just started) at ``address:port``."""
        with self._lock:
            self._watched[task] = _Watched(host, address, port)
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="server-watch", daemon=True)
            self._thread.start()

    def forget(self, task: str) -> None:
        """``task`` exited (or is being stopped): not watched any more."""
        with self._lock:
            self._watched.pop(task, None)

    def close(self) -> None:
        """Stop watching (the attempt is over). Safe to call more than once."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=CONNECT_TIMEOUT_S * 2)

    def _run(self) -> None:
        while not self._stop.wait(self._interval_s):
            with self._lock:
                watched = list(self._watched.items())
            for task, server in watched:
                self._look(task, server)

    def _look(self, task: str, server: _Watched) -> None:
        try:
            with socket.create_connection((server.address, server.port), CONNECT_TIMEOUT_S):
                pass
        except OSError as exc:
            if not server.answered:
                return
            server.misses += 1
            if server.misses == 1:
                server.first_miss = self._clock()
            if server.misses >= MISSES and self._current(task, server, forget=True):
                self._put(ServerSilent(task, server.host, server.first_miss,
                                       f"its port {server.port} stopped answering ({MISSES} "
                                       f"connects in a row failed: {exc.strerror or exc}) "
                                       "while its process ran"))
            return
        first, server.answered, server.misses = not server.answered, True, 0
        if first and self._current(task, server, forget=False):
            self._put(ServerAnswered(task, self._clock()))

    def _current(self, task: str, server: _Watched, *, forget: bool) -> bool:
        """Whether ``server`` is still ``task``'s watched start (not forgotten meanwhile because
        it exited, perhaps started again since); ``forget`` stops watching it."""
        with self._lock:
            if self._watched.get(task) is not server:
                return False
            if forget:
                del self._watched[task]
            return True
