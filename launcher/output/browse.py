"""``tfcluster logs RUN_DIR [TASK]`` and what ``status`` (:mod:`launcher.output.run_status`)
shares with it: a run directory read by a person, for a run that is still going or long finished,
from its files alone (``events.jsonl``, ``attempt-<N>/<type>-<index>.log``). Every file is
streamed: a log or an events file of any size is read in bounded memory.

Whether a run is still going is asked of its coordinator's lock (``.tfcluster-run.lock``, held
with ``flock`` for as long as the coordinator lives); a run without an end event whose lock
nobody holds lost its coordinator, and ``logs -f`` stops following it. Every problem (no run
there, no such task or attempt) is one :class:`~launcher.errors.UsageError` line.
"""

from __future__ import annotations

import codecs
import contextlib
import fcntl
import os
import re
import sys
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import BinaryIO, TextIO

from launcher.errors import UsageError
from launcher.output.latest_run import task_name
from launcher.output.run_files import open_run_file, refuse_planted, unsafe_to_usage
from launcher.run.directory import EVENTS_FILE, LOCK_FILE
from launcher.run.event_lines import EventLines
from launcher.run.events import JOB_ENDS, EventType
from worker.wire.safe_open import UnsafeFileError, open_file
from worker.wire.tfconfig import TaskId, TFConfigError, task_order

_ATTEMPT_DIR = re.compile(r"^attempt-(\d+)$")
#: ``logs -f`` looks for new lines this often.
FOLLOW_POLL_S = 0.2


def check_run_dir(run_dir: Path, verb: str) -> None:
    refuse_planted(run_dir / EVENTS_FILE, verb)  # a FIFO, a symlink: one line, never read
    if not run_dir.is_dir():
        raise UsageError(f"tfcluster {verb}: {run_dir} is not a directory; give the run directory "
                         "of a job (its --run-dir, by default runs/<job>-<timestamp>)")
    if not (run_dir / EVENTS_FILE).is_file():
        raise UsageError(f"tfcluster {verb}: {run_dir} holds no run (no {EVENTS_FILE}); give the "
                         "run directory of a job (its --run-dir, by default runs/<job>-<timestamp>)")


def coordinator_alive(run_dir: Path) -> bool | None:
    """Whether a live coordinator holds the run's lock (None: the run has no lock file)."""
    try:
        fd = open_file(run_dir / LOCK_FILE, os.O_RDONLY)  # a FIFO there must not block
    except UnsafeFileError as exc:
        raise unsafe_to_usage(exc, "status") from None
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    except OSError:
        return None
    finally:
        os.close(fd)
    return False


def ordered_tasks(tasks: Iterable[str]) -> list[str]:
    """Task names in the job's order (chief first); names that are no task last."""
    def key(name: str) -> tuple[int, int, str]:
        try:
            return (*task_order(TaskId.parse(name)), name)
        except TFConfigError:
            return 99, 0, name
    return sorted(tasks, key=key)



# --- logs -----------------------------------------------------------------------------------

def attempt_numbers(run_dir: Path) -> list[int]:
    found = [int(m.group(1)) for p in run_dir.iterdir() if p.is_dir()
             and (m := _ATTEMPT_DIR.match(p.name))]
    return sorted(found)


def log_path(run_dir: Path, task: str | None, attempt: int | None) -> tuple[Path, str, int]:
    """The log of ``task`` (default: the first task, chief first; ``chief``, ``worker-1`` are
    read as :func:`~launcher.output.latest_run.task_name` says) in ``attempt`` (default the
    latest); one clear line if there is no such attempt or task."""
    check_run_dir(run_dir, "logs")
    numbers = attempt_numbers(run_dir)
    if not numbers:
        raise UsageError(f"tfcluster logs: {run_dir} has no task logs yet (no attempt-<N>/)")
    if attempt is None:
        attempt = numbers[-1]
    elif attempt not in numbers:
        raise UsageError(f"tfcluster logs: no attempt {attempt} in {run_dir} "
                         f"(attempts: {', '.join(map(str, numbers))})")
    logs = {p.stem: p for p in (run_dir / f"attempt-{attempt}").glob("*.log")}
    names = {stem: _task_of(stem) for stem in logs}
    known = ordered_tasks([n for n in names.values() if n])
    if task is None:
        if not known:
            raise UsageError(f"tfcluster logs: attempt {attempt} of {run_dir} has no task logs")
        task = known[0]
    task = task_name(task, known)
    try:
        stem = TaskId.parse(task).file_stem
    except TFConfigError as exc:
        raise UsageError(f"tfcluster logs: {task!r} is not a task ({exc}); give one like "
                         f"worker:1 (tasks: {', '.join(known)})") from None
    if stem not in logs:
        raise UsageError(f"tfcluster logs: no task {task} in attempt {attempt} of {run_dir} "
                         f"(tasks: {', '.join(known) or 'none'})")
    return logs[stem], task, attempt


def _task_of(stem: str) -> str | None:
    kind, _, index = stem.rpartition("-")
    if not index.isdigit():
        return None
    with contextlib.suppress(TFConfigError):
        return str(TaskId.parse(f"{kind}:{index}"))
    return None


#: How much of a file is read at once: ``logs`` streams a log of any size in this much memory.
_CHUNK_BYTES = 1024 * 1024


class _EndWatch:
    """Whether ``events.jsonl`` has an end event yet, reading only what was added since the last
    look (a long job's events file can be large), a chunk at a time."""

    def __init__(self, path: Path) -> None:
        self.path, self.offset, self.ended = path, 0, False

    def __call__(self) -> bool:
        with open_run_file(self.path, "logs") as handle:
            handle.seek(self.offset)
            while not self.ended and (data := handle.read(_CHUNK_BYTES)):
                cut = data.rfind(b"\n") + 1  # a line still being written waits...
                if not cut and len(data) == _CHUNK_BYTES:
                    cut = len(data)  # ...unless it is longer than any end event
                self.offset += cut
                self.ended = any(f'"event":"{end.value}"'.encode() in data[:cut].replace(b" ", b"")
                                 for end in JOB_ENDS)
                if cut < len(data):
                    break
        return self.ended


def _of_the_job(run_dir: Path, task: str | None) -> bool:
    """Whether the job has started and ``task`` (None: any) is one of its tasks."""
    for _, record in EventLines(run_dir / EVENTS_FILE, lenient=True):
        if record["event"] == EventType.JOB_STARTED:
            tasks = record.get("tasks")
            return task is None or (isinstance(tasks, list) and task in tasks)
    return False


def _copy(handle: BinaryIO, out: TextIO) -> int:
    """Copy what ``handle`` holds from where it stands to ``out``, a chunk at a time; the bytes
    copied (a character cut between two chunks is decoded whole)."""
    decoder = codecs.getincrementaldecoder("utf-8")("replace")
    copied = 0
    while data := handle.read(_CHUNK_BYTES):
        copied += len(data)
        out.write(decoder.decode(data))
    out.write(decoder.decode(b"", final=True))
    out.flush()
    return copied


def print_log(path: Path, out: TextIO) -> int:
    """Copy the log to ``out`` (streamed: a log of any size); the offset reached."""
    with open_run_file(path, "logs") as handle:
        return _copy(handle, out)


def follow_log(run_dir: Path, task: str | None, attempt: int | None, out: TextIO, *,
               err: TextIO = sys.stderr, poll_s: float = FOLLOW_POLL_S,
               sleep: Callable[[float], None] = time.sleep) -> None:
    """Print the log and then what is added to it until the job ends, or its coordinator is gone
    (no one holds the run's lock: nothing more will be written; said on ``err``). Without
    ``attempt`` it moves on to the next attempt's log of the same task when the job restarts. A
    task of the running job that has not written a line yet (so has no log) is waited for."""
    check_run_dir(run_dir, "logs")
    task = None if task is None else task_name(task, ())
    job_ended = _EndWatch(run_dir / EVENTS_FILE)
    while True:
        ended = job_ended()
        gone = not ended and coordinator_alive(run_dir) is not True
        try:
            path, task, current = log_path(run_dir, task, attempt)
            break
        except UsageError:
            if ended or gone or not _of_the_job(run_dir, task):
                raise
        sleep(poll_s)
    offset = 0
    while True:
        ended = job_ended()  # before reading: nothing written before the end is missed
        gone = not ended and coordinator_alive(run_dir) is not True
        with open_run_file(path, "logs") as handle:
            handle.seek(offset)
            offset += _copy(handle, out)
        if ended:
            return
        if gone:
            err.write(f"[tfcluster] the run's coordinator is gone (no end recorded): nothing "
                      f"more will be written; continue the run with tfcluster run --resume "
                      f"{run_dir}\n")
            err.flush()
            return
        if attempt is None and (newer := [n for n in attempt_numbers(run_dir) if n > current]):
            nxt = run_dir / f"attempt-{newer[0]}" / path.name
            if nxt.exists():
                err.write(f"[tfcluster] attempt {newer[0]} started: following {nxt}\n")
                err.flush()
                path, current, offset = nxt, newer[0], 0
                continue
        sleep(poll_s)
