"""Choosing free TCP ports for simulated-cluster tasks without racing other jobs.

Three layers keep two clusters started at the same moment from colliding:

1. ports are picked *outside* the kernel's ephemeral range (``ip_local_port_range``), so an outgoing
   connection of any program on the host is never given one of them;
2. every chosen port is claimed with an exclusive ``flock`` on a per-port lock file that the
   coordinator holds for the life of the job, so a concurrent tfcluster skips it;
3. the port is test-bound the way gRPC binds it (all interfaces, ``SO_REUSEADDR``) before it is
   handed out.

A non-tfcluster program can still take a port between the check and TensorFlow's bind; the
coordinator recognises TensorFlow's ``Could not start gRPC server`` at start-up and retries on fresh
ports (see ``launcher.job.policy``).

Where the search starts is derived from the job's name (:func:`port_seed`), so that ``tfcluster
plan`` shows the ports that ``run`` then takes, the same at every call, as long as they are free.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import random
import socket
import stat
import tempfile
import zlib
from collections.abc import Iterable
from pathlib import Path

from launcher.errors import TfclusterError
from worker.wire.safe_open import UnsafeFileError, kind_of, open_file

_EPHEMERAL_RANGE_FILE = "/proc/sys/net/ipv4/ip_local_port_range"
_DEFAULT_EPHEMERAL = (32768, 60999)
_LOWEST = 20000


class PortExhaustedError(TfclusterError):
    """Fewer ports than tasks could be found; the message says how many and what to do. Like every
    :class:`TfclusterError` it reaches the user as one line, without a traceback."""

    def __init__(self, wanted: int, low: int, high: int, found: int | None = None) -> None:
        self.wanted, self.low, self.high, self.found = wanted, low, high, found
        span = high - low + 1
        where = (f"could not find {wanted} free port(s) in {low}-{high} (the ports outside this "
                 "host's ephemeral range)")
        if wanted > span:
            what = (f", which holds only {span}: run at most {span} tasks with allocated ports on "
                    "this host")
        else:
            free = "" if found is None else f", only {found} are free"
            what = f"{free}: stop other jobs that hold ports in that range, run fewer tasks"
        super().__init__(f"{where}{what}, or give the tasks explicit ports in a spec")


class PortLockError(TfclusterError):
    """The directory of port lock files cannot be used (another user's, read-only, full)."""

    def __init__(self, lock_dir: Path, exc: OSError) -> None:
        super().__init__(f"cannot use the port lock directory {lock_dir}: {exc.strerror or exc} "
                         "(set TMPDIR to a directory of your own)")


def ephemeral_range() -> tuple[int, int]:
    try:
        low, high = Path(_EPHEMERAL_RANGE_FILE).read_text().split()
        return int(low), int(high)
    except (OSError, ValueError):
        return _DEFAULT_EPHEMERAL


def candidate_range() -> tuple[int, int]:
    """The widest range of ports that the kernel never hands out as ephemeral ports."""
    low, high = ephemeral_range()
    below = (_LOWEST, low - 1)
    above = (high + 1, 65535)
    return below if below[1] - below[0] >= above[1] - above[0] else above


def port_is_free(port: int) -> bool:
    """True when a server could bind ``port`` on every interface right now (IPv4 and IPv6)."""
    families = [socket.AF_INET] + ([socket.AF_INET6] if socket.has_ipv6 else [])
    for family in families:
        try:
            sock = socket.socket(family, socket.SOCK_STREAM)
        except OSError:
            continue  # family not available on this host
        with sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6:
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            try:
                sock.bind(("::" if family == socket.AF_INET6 else "0.0.0.0", port))
            except OSError:
                return False
    return True


def _refuse_unless_own_dir(path: Path) -> None:
    """The lock directory is in a shared place (``/tmp``): it must be a directory of this user
    that not everyone can write, not a symlink nor a directory someone planted at its name."""
    info = os.stat(path, follow_symlinks=False)
    if not stat.S_ISDIR(info.st_mode):
        raise UnsafeFileError(str(path), kind_of(info.st_mode), writing=True)
    if info.st_uid != os.geteuid() or info.st_mode & stat.S_IWOTH:
        raise UnsafeFileError(str(path), f"a directory others can write (uid {info.st_uid}, "
                              f"mode {stat.S_IMODE(info.st_mode):o})", writing=True)


def port_seed(job: str) -> str:
    """What the port search of ``job`` starts from: its name (``plan`` and ``run`` of one spec agree)."""
    return f"tfcluster-job:{job}"


class PortAllocator:
    """Hands out ports and holds their locks until :meth:`release` / :meth:`close`. With a
    ``seed`` (:func:`port_seed`) the search starts at the same port every time: the first free
    ports from there; without, at a random one."""

    def __init__(self, lock_dir: str | None = None, port_range: tuple[int, int] | None = None,
                 seed: str | None = None):
        self.lock_dir = Path(lock_dir or os.path.join(tempfile.gettempdir(),
                                                      f"tfcluster-ports-{os.getuid()}"))
        self.low, self.high = port_range or candidate_range()
        #: Where the search starts (:func:`port_seed`); None: at random.
        self.seed = seed
        self._held: dict[int, int] = {}  # port -> fd of its lock file

    def allocate(self, count: int, avoid: Iterable[int] = ()) -> list[int]:
        """``count`` distinct free ports, none of them in ``avoid``. Raises PortExhaustedError when
        there are too few, PortLockError when the lock directory cannot be used (both are
        TfclusterErrors: one line for the user); after an error no port of this call stays held."""
        avoided = set(avoid) | set(self._held)
        span = self.high - self.low + 1
        if count > span:
            raise PortExhaustedError(count, self.low, self.high)
        try:
            self.lock_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
            _refuse_unless_own_dir(self.lock_dir)
        except OSError as exc:
            raise PortLockError(self.lock_dir, exc) from None
        start = (random.randrange(span) if self.seed is None
                 else zlib.crc32(self.seed.encode()) % span)
        chosen: list[int] = []
        try:
            for offset in range(span):
                if len(chosen) == count:
                    break
                port = self.low + (start + offset) % span
                if port in avoided:
                    continue
                fd = self._lock(port)
                if fd is None:
                    continue
                if port_is_free(port):
                    self._held[port] = fd
                    chosen.append(port)
                else:
                    os.close(fd)
        except PortLockError:
            self.release(chosen)
            raise
        if len(chosen) < count:
            self.release(chosen)
            raise PortExhaustedError(count, self.low, self.high, found=len(chosen))
        return chosen

    def _lock(self, port: int) -> int | None:
        try:
            fd = open_file(self.lock_dir / f"{port}.lock", os.O_CREAT | os.O_RDWR, 0o600)
        except OSError as exc:
            raise PortLockError(self.lock_dir, exc) from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            return None
        return fd

    def release(self, ports: Iterable[int]) -> None:
        for port in ports:
            fd = self._held.pop(port, None)
            if fd is not None:
                with contextlib.suppress(OSError):
                    os.close(fd)

    def close(self) -> None:
        """Release every port; safe to call more than once."""
        self.release(list(self._held))

    def __enter__(self) -> PortAllocator:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    @property
    def held(self) -> frozenset[int]:
        return frozenset(self._held)
