"""The run directory: ``events.jsonl``, ``attempt-<N>/<type>-<index>.log`` and ``summary.json``.

One run directory holds one run: :meth:`RunDir.create` refuses a path that is a file or that already
holds a run's ``events.jsonl`` (it creates that file exclusively, so two runs started at once cannot
both have it either). Every problem with the directory is a :class:`RunDirError`, one line saying
what is wrong and what to do.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from launcher.errors import TfclusterError
from launcher.layout import AGENTS_DIR
from worker.tfconfig import TaskId

EVENTS_FILE = "events.jsonl"
SUMMARY_FILE = "summary.json"
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


def default_run_dir(job: str, base: str = "runs", now: float | None = None) -> Path:
    """``runs/<job>-<YYYYmmdd-HHMMSS>``, with a numeric suffix if that already exists."""
    stamp = time.strftime("%Y%m%d-%H%M%S", time.localtime(now))
    candidate = Path(base) / f"{job}-{stamp}"
    suffix = 1
    while candidate.exists():
        suffix += 1
        candidate = Path(base) / f"{job}-{stamp}-{suffix}"
    return candidate


def _previous_run(events: Path) -> tuple[str | None, float | None]:
    """The job and start time named by an existing ``events.jsonl`` (None where unreadable)."""
    try:
        with events.open(encoding="utf-8", errors="replace") as handle:
            first = json.loads(handle.readline(_FIRST_LINE_BYTES))
    except (OSError, ValueError):
        return None, None
    if not isinstance(first, dict):
        return None, None
    job, started = first.get("job"), first.get("ts")
    return (job if isinstance(job, str) else None,
            float(started) if isinstance(started, int | float) else None)


@dataclass(frozen=True)
class RunDir:
    path: Path

    def _holds_a_run(self) -> bool:
        """Whether ``events.jsonl`` exists with something in it (an empty one, left by a run that
        could not write its first event, holds no run)."""
        try:
            return self.events.stat().st_size > 0
        except OSError:
            return False

    def check(self) -> None:
        """Refuse, before anything is created, a path that cannot be this run's directory (a
        file, or a directory holding another run). Raises :class:`RunDirError`."""
        if self.path.exists() and not self.path.is_dir():
            raise RunDirError.from_os_error(self.path, FileExistsError(errno.EEXIST, "exists"))
        if self._holds_a_run():
            raise RunDirInUse(self.path, *_previous_run(self.events))

    def create(self) -> None:
        """Create the directory and this run's empty ``events.jsonl`` (exclusively: a run that
        got there first wins). Raises :class:`RunDirError`."""
        self.check()
        try:
            self.path.mkdir(parents=True, exist_ok=True)
            with contextlib.suppress(FileNotFoundError):
                if not self._holds_a_run():
                    self.events.unlink()
        except OSError as exc:
            raise RunDirError.from_os_error(self.path, exc) from exc
        try:
            self.events.open("x").close()
        except FileExistsError as exc:
            raise RunDirInUse(self.path, *_previous_run(self.events)) from exc
        except OSError as exc:
            raise RunDirError.from_os_error(self.path, exc) from exc

    @property
    def events(self) -> Path:
        return self.path / EVENTS_FILE

    @property
    def summary(self) -> Path:
        return self.path / SUMMARY_FILE

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

    def write_summary(self, summary: dict[str, Any]) -> None:
        """Replace ``summary.json`` atomically; OSError if it cannot be written (then no partial
        file is left)."""
        tmp = self.summary.with_suffix(".json.tmp")
        try:
            tmp.write_text(json.dumps(summary, indent=2, sort_keys=True) + "\n")
            os.replace(tmp, self.summary)
        except OSError:
            with contextlib.suppress(OSError):
                tmp.unlink()
            raise
