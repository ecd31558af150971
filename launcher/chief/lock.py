"""One run per checkpoint directory: a run holds a lock on its ``checkpoint.dir`` for its whole life.

Two runs sharing a directory harm each other silently (the second resumes from the first's
checkpoints, the first's retention deletes the second's), so the second is refused before anything
starts, with one line naming the holder. A lock whose holder is gone is stale and is taken over,
with one line saying so.

The lock is a file inside the directory, :data:`LOCK_NAME`, holding a :class:`HolderRecord` as JSON.
How it is taken depends on where the directory is, behind the :class:`LockFile` interface:
``flock`` when the chief is local (:mod:`launcher.chief.flock_lock`: the kernel releases it when the
holder dies), an exclusive create plus a heartbeat when it is remote (:mod:`launcher.chief.remote_lock`:
SFTP has no ``flock``). :func:`held` is the logic both share: refuse, take over, refresh the
heartbeat, release.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, replace
from typing import Protocol

from launcher.errors import TfclusterError
from worker.wire.process_identity import ProcStat, read_stat
from worker.wire.safe_open import UnsafeFileError

#: The lock file's name inside the checkpoint directory (TensorFlow ignores files it did not write).
LOCK_NAME = ".tfcluster.lock"
#: Two start times of one pid closer than this are the same process (the boot time is whole
#: seconds).
START_TIME_TOLERANCE_S = 1.0
#: How long :func:`held` waits for the heartbeat thread to finish at the end of the run.
HEARTBEAT_JOIN_S = 5.0


@dataclass(frozen=True)
class HolderRecord:
    """Who holds a checkpoint directory: the lock file's content."""

    host: str
    pid: int
    #: The holder's process start time (epoch seconds), so that a reused pid is not taken for it.
    started: float
    job: str
    run_dir: str
    #: When the holder last confirmed it is alive (epoch seconds; remote locks only).
    heartbeat: float | None = None

    @classmethod
    def this_process(cls, job: str, run_dir: str) -> HolderRecord:
        pid = os.getpid()
        started = start_time(pid)
        assert started is not None  # this very process
        return cls(host=socket.gethostname(), pid=pid, started=started, job=job, run_dir=run_dir)

    @classmethod
    def parse(cls, text: str | None) -> HolderRecord | None:
        """The record in a lock file's text; None when there is none or it is not one."""
        try:
            data = json.loads(text or "")
            return cls(host=str(data["host"]), pid=int(data["pid"]),
                       started=float(data["started"]), job=str(data["job"]),
                       run_dir=str(data["run_dir"]),
                       heartbeat=None if data.get("heartbeat") is None
                       else float(data["heartbeat"]))
        except (ValueError, TypeError, KeyError):
            return None

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True) + "\n"

    def beating(self, now: float) -> HolderRecord:
        return replace(self, heartbeat=now)

    def same_holder(self, other: HolderRecord | None) -> bool:
        """Whether ``other`` is this holder's record (whatever its heartbeat)."""
        return other is not None and (other.host, other.pid, other.started, other.run_dir) == (
            self.host, self.pid, self.started, self.run_dir)

    def describe(self) -> str:
        return f"job {self.job} (pid {self.pid} on host {self.host}, run dir {self.run_dir})"


def start_time(pid: int) -> float | None:
    """When process ``pid`` started, in epoch seconds, as psutil's ``create_time`` has it (the
    boot time plus the start in clock ticks: lock files written with either agree); None if
    there is no such process."""
    stat = read_stat(pid)
    return None if stat is None else _started(stat)


def _started(stat: ProcStat) -> float:
    return _boot_time() + stat.start_ticks / os.sysconf("SC_CLK_TCK")


def _boot_time() -> float:
    with open("/proc/stat", "rb") as handle:
        for line in handle:
            if line.startswith(b"btime "):
                return float(line.split()[1])
    raise OSError("/proc/stat has no btime")


def process_alive(pid: int, started: float) -> bool:
    """Whether the process ``pid`` that started at ``started`` still runs on this machine."""
    stat = read_stat(pid)
    if stat is None:  # gone, or hidden from us (hidepid): then it is taken to be alive
        return os.path.exists(f"/proc/{pid}")
    return not stat.zombie and abs(_started(stat) - started) < START_TIME_TOLERANCE_S


class CheckpointDirInUse(TfclusterError):
    """Another live run holds the checkpoint directory."""

    def __init__(self, directory: str, holder: HolderRecord | None) -> None:
        self.directory, self.holder = directory, holder
        who = "another tfcluster run (its lock file names no holder)" if holder is None \
            else holder.describe()
        super().__init__(f"checkpoint dir {directory} is in use by {who}; wait for it or use "
                         "another checkpoint.dir")


class CheckpointLockError(TfclusterError):
    """The checkpoint directory's lock file cannot be created or read."""

    def __init__(self, directory: str, exc: OSError) -> None:
        self.directory = directory
        if isinstance(exc, UnsafeFileError):  # planted at its name: the one line says it all
            super().__init__(str(exc))
            return
        super().__init__(f"checkpoint dir {directory}: cannot create its lock file "
                         f"{LOCK_NAME}: {exc.strerror or exc} (choose a checkpoint.dir this "
                         "user can write to)")


@dataclass(frozen=True)
class Acquired:
    """The lock is ours. ``stale``: the record of the dead run it was taken from, if any."""

    stale: HolderRecord | None = None


@dataclass(frozen=True)
class Busy:
    """A live run holds the lock (``holder``: its record, None if unreadable)."""

    holder: HolderRecord | None


class LockFile(Protocol):
    """The lock file of one checkpoint directory, local or remote."""

    @property
    def heartbeat_s(self) -> float | None:
        """How often :meth:`refresh` must be called while the lock is held (None: never)."""

    def acquire(self, record: HolderRecord) -> Acquired | Busy:
        """Take the lock for ``record`` (creating the directory if missing), unless a live run
        holds it; a stale lock is taken over. OSError when the file cannot be made or read."""

    def refresh(self, record: HolderRecord) -> bool:
        """Renew the heartbeat; False when the lock is no longer ours (OSError: unreachable)."""

    def release(self) -> None:
        """Give the lock up and remove the file if it is still ours; safe to call more than once."""


class Heartbeat:
    """Calls :meth:`LockFile.refresh` every ``heartbeat_s`` from its own thread until stopped;
    tells ``warn`` once when the lock could not be refreshed or was lost."""

    def __init__(self, lock: LockFile, record: HolderRecord, every_s: float, directory: str,
                 warn: Callable[[str], None]) -> None:
        self._lock, self._record, self._every_s = lock, record, every_s
        self._directory, self._warn = directory, warn
        self._stop = threading.Event()
        self._warned = False
        self._thread = threading.Thread(target=self._run, name="checkpoint-lock", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self._every_s):
            try:
                ours = self._lock.refresh(self._record.beating(time.time()))
            except Exception as exc:  # a dropped connection must not end the job
                self._warn_once(f"cannot refresh the lock on checkpoint dir {self._directory} "
                                f"({type(exc).__name__}: {exc}); another run may take it over")
                continue
            if not ours:
                self._warn_once(f"lost the lock on checkpoint dir {self._directory} to another "
                                "run: its checkpoints may now mix with this run's")

    def _warn_once(self, text: str) -> None:
        if not self._warned:
            self._warned = True
            self._warn(text)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(HEARTBEAT_JOIN_S)


@contextlib.contextmanager
def held(lock: LockFile, directory: str, record: HolderRecord,
         warn: Callable[[str], None]) -> Iterator[None]:
    """Hold ``lock`` for the time of the ``with``: raises :class:`CheckpointDirInUse` when a live
    run holds it and :class:`CheckpointLockError` when it cannot be taken, before the body runs;
    says so in one line when a stale lock is taken over; keeps a remote lock's heartbeat; releases
    the lock however the body ends."""
    try:
        outcome = lock.acquire(record.beating(time.time()))
    except OSError as exc:
        raise CheckpointLockError(directory, exc) from exc
    if isinstance(outcome, Busy):
        raise CheckpointDirInUse(directory, outcome.holder)
    try:
        if outcome.stale is not None:
            warn(f"checkpoint dir {directory}: taking over the stale lock of "
                 f"{outcome.stale.describe()}: that run is gone")
        every = lock.heartbeat_s
        heartbeat = None if every is None else Heartbeat(lock, record, every, directory, warn)
        try:
            yield
        finally:
            if heartbeat is not None:
                heartbeat.stop()
    finally:
        try:
            lock.release()
        except Exception as exc:  # the run is over either way; the next one takes it over
            warn(f"could not remove the lock file {LOCK_NAME} of checkpoint dir {directory} "
                 f"({type(exc).__name__}: {exc}); the next run will take it over as stale")
