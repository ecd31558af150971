"""The run directory: ``events.jsonl``, ``attempt-<N>/<type>-<index>.log``, ``spec.json`` and
``summary.json``.

One run directory holds one run: :meth:`RunDir.create` refuses a path that is a file or that already
holds a run's ``events.jsonl`` (it creates that file exclusively, so two runs started at once cannot
both have it either). Every problem with the directory is a :class:`RunDirError`, one line saying
what is wrong and what to do.

A run can be continued by a later coordinator (``tfcluster run --resume``): the directory keeps the
validated spec it ran (``spec.json``, mode 0600: its env may hold secrets), and the coordinator
using the directory holds an ``flock`` on :data:`LOCK_FILE` for as long as it lives (the kernel drops
it when the process dies, SIGKILL included), so a resume can tell a dead coordinator from a live one.
A :class:`RunDir` made with ``resuming=True`` appends to the run already there instead.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from launcher.errors import TfclusterError
from launcher.layout import AGENTS_DIR
from launcher.run import json_text
from worker.wire.safe_open import (
    UnsafeFileError,
    open_file,
    open_reading,
    refuse_unless_regular,
    replace_file,
    truncate_ours,
)
from worker.wire.tfconfig import TaskId

EVENTS_FILE = "events.jsonl"
SUMMARY_FILE = "summary.json"
#: The validated spec the run started with, for ``tfcluster run --resume``.
SPEC_FILE = "spec.json"
#: Locked (``flock``) by the coordinator using the directory, for its whole life.
LOCK_FILE = ".tfcluster-run.lock"
#: Most bytes of ``spec.json`` that are read back (a spec is bounded well below this).
MAX_SPEC_BYTES = 64 * 1024 * 1024
#: What to do about a run that cannot be resumed: never a plain "start a new run", which would
#: start at step 0 in the same checkpoint directory and write over the checkpoints kept there.
NEW_RUN = ("start a new run with a checkpoint directory of its own (--checkpoint-dir: a new run "
           "starts at step 0 and would write over this run's checkpoints)")
#: How much of an existing ``events.jsonl`` is read to name the run it holds.
_FIRST_LINE_BYTES = 64 * 1024

#: Errors a write to an open file gets from the disk under it.
WRITE_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EIO, errno.EFBIG, errno.EROFS})

#: What an OS error on the run directory means, and what the user can do about it.
_ADVICE: dict[int, tuple[str, str]] = {
    errno.EACCES: ("permission denied", "choose a --run-dir you can write to"),
    errno.EPERM: ("permission denied", "choose a --run-dir you can write to"),
    errno.EROFS: ("read-only file system", "choose a --run-dir on a writable file system"),
    errno.ENOSPC: ("no space left on device", "free some space or choose another --run-dir"),
    errno.EDQUOT: ("disk quota exceeded", "free some space or choose another --run-dir"),
    errno.EEXIST: ("is a file, not a directory", "choose another --run-dir or remove the file"),
    errno.ENOTDIR: ("a part of its path is a file, not a directory", "choose another --run-dir"),
    errno.ENAMETOOLONG: ("the path is too long", "choose a shorter --run-dir"),
}


class RunDirError(TfclusterError):
    """The run directory cannot be used: ``run dir X: <what is wrong> (<what to do>)``."""

    def __init__(self, path: Path, detail: str) -> None:
        self.path, self.detail = path, detail
        super().__init__(f"run dir {path}: {detail}")

    @classmethod
    def from_os_error(cls, path: Path, exc: OSError, doing: str = "") -> RunDirError:
        """``exc`` in words; ``doing`` (e.g. "while writing events.jsonl") says when it happened."""
        if isinstance(exc, UnsafeFileError):  # planted at its name: the one line says it all
            return cls(path, exc.message)
        problem, hint = _ADVICE.get(exc.errno or 0, (
            exc.strerror or str(exc), "check the directory or choose another --run-dir"))
        return cls(path, f"{problem}{' ' + doing if doing else ''} ({hint})")


class RunDirInUse(RunDirError):
    """The directory already holds a run's ``events.jsonl``: two runs' events must not mix."""

    def __init__(self, path: Path, job: str | None, started: float | None) -> None:
        self.job, self.started = job, started
        when = "" if started is None else \
            f", started {time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(started))}"
        super().__init__(path, f"already holds a run (job {job or 'unknown'}{when}); "
                         "choose another --run-dir or remove it")


class RunDirLive(RunDirError):
    """The coordinator that uses the directory is still running (it holds :data:`LOCK_FILE`)."""

    def __init__(self, path: Path, pid: int | None) -> None:
        self.pid = pid
        who = "its coordinator" if pid is None else f"its coordinator (pid {pid})"
        super().__init__(path, f"{who} is still running; wait for it to end, or stop it "
                         f"(Ctrl-C, or kill {pid or 'PID'}), before resuming")


def default_run_dir(job: str, base: str = "runs", now: float | None = None) -> Path:
    """``runs/<job>-<YYYYmmdd-HHMMSS>``, with a numeric suffix if that already exists."""
    stamp = time.strftime("%Y%m%d-%H%M%S", time.localtime(now))
    candidate = Path(base) / f"{job}-{stamp}"
    suffix = 1
    while candidate.exists():
        suffix += 1
        candidate = Path(base) / f"{job}-{stamp}-{suffix}"
    return candidate


#: How many ``-N`` suffixes :func:`new_run_dir` tries in one second before it gives up.
MAX_NAME_SUFFIX = 1000


def new_run_dir(job: str, base: str = "runs", now: float | None = None) -> Path:
    """A new, empty directory ``<base>/<job>-<YYYYmmdd-HHMMSS>`` (``-2``, ``-3``, ... when
    taken), created here with ``mkdir``: runs that pick the same name at the same moment get one
    each, since ``mkdir`` succeeds for one of them alone. Raises :class:`RunDirError`."""
    stamp = time.strftime("%Y%m%d-%H%M%S", time.localtime(now))
    root = Path(base)
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise RunDirError.from_os_error(root, exc) from exc
    for suffix in range(1, MAX_NAME_SUFFIX + 1):
        candidate = root / (f"{job}-{stamp}" if suffix == 1 else f"{job}-{stamp}-{suffix}")
        try:
            candidate.mkdir()
        except FileExistsError:
            continue
        except OSError as exc:
            raise RunDirError.from_os_error(candidate, exc) from exc
        return candidate
    raise RunDirError(root / f"{job}-{stamp}", f"{MAX_NAME_SUFFIX} runs of job {job} started "
                      "in the same second (choose a --run-dir)")


def _previous_run(events: Path) -> tuple[str | None, float | None]:
    """The job and start time named by an existing ``events.jsonl`` (None where unreadable)."""
    try:
        with open_reading(events) as handle:
            first = json.loads(handle.readline(_FIRST_LINE_BYTES).decode("utf-8", "replace"))
    except (OSError, ValueError):
        return None, None
    if not isinstance(first, dict):
        return None, None
    job, started = first.get("job"), first.get("ts")
    return (job if isinstance(job, str) else None,
            float(started) if isinstance(started, int | float) else None)


class _Lock:
    """The open, ``flock``ed :data:`LOCK_FILE` of a run directory (close-on-exec: agents and tasks
    never inherit it, so it dies with the coordinator alone)."""

    def __init__(self) -> None:
        self.fd: int | None = None

    def take(self, path: Path) -> int | None:
        """Lock ``path``; None once locked, else the pid the holder wrote into it (0: unknown)."""
        if self.fd is not None:
            return None
        fd = open_file(path, os.O_RDWR | os.O_CREAT, 0o644)  # never through a planted symlink
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            text = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
            os.close(fd)
            return int(text) if text.isdigit() else 0
        except BaseException:
            os.close(fd)
            raise
        try:
            truncate_ours(fd, str(path))
        except BaseException:
            os.close(fd)
            raise
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        self.fd = fd
        return None

    def release(self) -> None:
        fd, self.fd = self.fd, None
        if fd is not None:
            os.close(fd)

    def __del__(self) -> None:  # a RunDir dropped without release (an in-process coordinator)
        self.release()


@dataclass(frozen=True)
class RunDir:
    path: Path
    #: Continue the run already in the directory (``tfcluster run --resume``): append to it.
    resuming: bool = False
    #: Written to ``spec.json`` when a new run creates the directory (what a resume reads back).
    stored_spec: Mapping[str, Any] | None = field(default=None, compare=False, repr=False)
    _lock: _Lock = field(default_factory=_Lock, compare=False, repr=False)

    def _holds_a_run(self) -> bool:
        """Whether ``events.jsonl`` exists with something in it (an empty one, left by a run that
        could not write its first event, holds no run)."""
        try:
            return self.events.stat().st_size > 0
        except OSError:
            return False

    def check(self) -> None:
        """Refuse, before anything is created, a path that cannot be this run's directory (a
        file, or a directory holding another run; when resuming: anything but a run whose
        coordinator is gone and whose spec was kept). Raises :class:`RunDirError`."""
        try:  # a name planted in it (a symlink to a victim's file): refused, never written through
            for name in (EVENTS_FILE, LOCK_FILE):
                refuse_unless_regular(self.path / name, writing=True)
        except UnsafeFileError as exc:
            raise RunDirError.from_os_error(self.path, exc) from exc
        except OSError:  # NotADirectoryError and the like: said below
            pass
        if self.resuming:
            self._check_resumable()
            return
        if self.path.exists() and not self.path.is_dir():
            raise RunDirError.from_os_error(self.path, FileExistsError(errno.EEXIST, "exists"))
        if self._holds_a_run():
            raise RunDirInUse(self.path, *_previous_run(self.events))

    def _check_resumable(self) -> None:
        if not self.path.is_dir():
            detail = "is not a directory" if self.path.exists() else "does not exist"
            raise RunDirError(self.path, f"{detail} (give the run directory of the job to resume)")
        if not self._holds_a_run():
            raise RunDirError(self.path, f"is not a tfcluster run (no {EVENTS_FILE}); give the "
                              "run directory of the job to resume")
        if not self.spec_file.is_file():
            raise RunDirError(self.path, f"has no stored spec ({SPEC_FILE}: the run was started "
                              f"by a tfcluster without --resume), so it cannot be resumed; {NEW_RUN}")
        self._lock_or_refuse()
        self.release()

    def _lock_or_refuse(self, doing: str = f"while locking {LOCK_FILE}") -> None:
        try:
            holder = self._lock.take(self.path / LOCK_FILE)
        except OSError as exc:
            raise RunDirError.from_os_error(self.path, exc, doing) from exc
        if holder is not None and self.resuming:
            raise RunDirLive(self.path, holder or None)
        if holder is not None:  # a new run: the run in there is another one, not ours to stop
            who = "another tfcluster" + (f" (pid {holder})" if holder else "")
            raise RunDirError(self.path, f"{who} is using it right now (choose another "
                              "--run-dir)")

    def release(self) -> None:
        """Let go of the directory's lock (safe to call more than once; a process that ends lets
        go of it too, however it ends)."""
        self._lock.release()

    def read_stored_spec(self) -> dict[str, Any]:
        """The record :meth:`create` wrote to ``spec.json``. Raises :class:`RunDirError`."""
        try:
            with open_reading(self.spec_file) as handle:
                data = json.loads(handle.read(MAX_SPEC_BYTES))
        except OSError as exc:
            raise RunDirError.from_os_error(self.path, exc, f"while reading {SPEC_FILE}") from exc
        except (ValueError, RecursionError) as exc:  # not JSON, not UTF-8, nested too deep
            raise RunDirError(self.path, f"{SPEC_FILE} is not valid JSON ({exc}); the run "
                              f"cannot be resumed, {NEW_RUN}") from exc
        if not isinstance(data, dict):
            raise RunDirError(self.path, f"{SPEC_FILE} does not hold a stored spec; the run "
                              f"cannot be resumed, {NEW_RUN}")
        return data

    def _write_stored_spec(self, record: Mapping[str, Any]) -> None:
        """``spec.json``, readable by its owner only, replaced atomically."""
        replace_file(self.spec_file,
                     (json_text.dumps(record, indent=2, sort_keys=True) + "\n").encode(), 0o600)

    def create(self) -> None:
        """Create the directory, this run's empty ``events.jsonl`` (exclusively: a run that
        got there first wins) and ``spec.json``, and lock it for this process; when resuming,
        only lock it. Raises :class:`RunDirError`."""
        self.check()
        if self.resuming:
            self._lock_or_refuse()
            return
        try:
            self.path.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise RunDirError.from_os_error(self.path, exc) from exc
        # The lock first: a run creates events.jsonl only while it holds the lock, so an empty
        # one found under the lock was left by a run that is gone, and removing it harms no one.
        self._lock_or_refuse(doing="")  # the first file a new run creates in its directory
        try:
            with contextlib.suppress(FileNotFoundError):
                if not self._holds_a_run():
                    self.events.unlink()
            self.events.open("x").close()
        except FileExistsError as exc:
            self.release()
            raise RunDirInUse(self.path, *_previous_run(self.events)) from exc
        except OSError as exc:
            self.release()
            raise RunDirError.from_os_error(self.path, exc) from exc
        if self.stored_spec is not None:
            try:
                self._write_stored_spec(self.stored_spec)
            except OSError as exc:
                raise RunDirError.from_os_error(self.path, exc, f"while writing {SPEC_FILE}") \
                    from exc

    @property
    def events(self) -> Path:
        return self.path / EVENTS_FILE

    @property
    def summary(self) -> Path:
        return self.path / SUMMARY_FILE

    @property
    def spec_file(self) -> Path:
        return self.path / SPEC_FILE

    def caused(self, exc: OSError) -> bool:
        """Whether ``exc`` is this directory failing: an error on a file inside it, or a write
        error without a file name (a write to a file already open: the job keeps only run dir
        files open for writing) of the kinds a disk gives."""
        if exc.filename is None:
            return exc.errno in WRITE_ERRNOS
        name = os.path.abspath(os.fsdecode(exc.filename))
        return Path(name).is_relative_to(os.path.abspath(self.path))

    def attempt_dir(self, attempt: int) -> Path:
        return self.path / f"attempt-{attempt}"

    def task_log(self, attempt: int, task: TaskId) -> Path:
        return self.attempt_dir(attempt) / f"{task.file_stem}.log"

    def agent_log(self, host: str) -> Path:
        """The log of ``host``'s agent (one agent lives for the whole job; a replacement for a
        lost one appends to it)."""
        return self.path / AGENTS_DIR / f"{host}.log"

    def write_summary(self, summary: Mapping[str, Any]) -> None:
        """Replace ``summary.json`` atomically (its one writer: the sections others add go
        through :func:`launcher.run.summary.job_summary`); OSError if it cannot be written
        (then no partial file is left)."""
        replace_file(self.summary, (json_text.dumps(summary, indent=2, sort_keys=True) + "\n").encode(),
                     0o644)
