"""Per-task log files of one attempt: ``attempt-<N>/<type>-<index>.log`` (stdout and stderr).

Each is bounded (:data:`MAX_TASK_LOG_BYTES`): a task that prints without end cannot fill the
disk. Past the bound its later lines are not kept; the log ends with one line saying so, and the
console says it once."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TextIO

from launcher.run.directory import RunDir
from worker.wire.safe_open import make_dirs, open_appending
from worker.wire.tfconfig import TaskId

#: The most a task's log of one attempt keeps.
MAX_TASK_LOG_BYTES = 1024 * 1024 * 1024


class TaskLogs:
    """Thread-safe: each agent's reader thread writes its own tasks' lines as they arrive. Lines
    that come after :meth:`close` (an agent's last words) are still appended."""

    def __init__(self, run_dir: RunDir, attempt: int,
                 on_error: Callable[[str], None] | None = None, *,
                 max_bytes: int = MAX_TASK_LOG_BYTES) -> None:
        self._run_dir = run_dir
        self._attempt = attempt
        self._on_error = on_error
        self.max_bytes = max_bytes
        self._bytes: dict[str, int] = {}  # written to each task's log
        #: Lines not kept per task (its log reached ``max_bytes``).
        self.dropped: dict[str, int] = {}
        self._failed: set[str] = set()  # tasks whose log cannot be written (disk full, ...)
        self._files: dict[str, TextIO] = {}
        self._lock = threading.Lock()
        self._closed = False
        run_dir.path.mkdir(parents=True, exist_ok=True)  # the user chose it: symlinks are fine
        make_dirs(run_dir.path, run_dir.attempt_dir(attempt).name)  # a planted symlink is not

    def path(self, task: str) -> Path:
        return self._run_dir.task_log(self._attempt, TaskId.parse(task))

    def write(self, task: str, line: str) -> None:
        """Append one line; never raises: a log that cannot be written is reported once (through
        ``on_error``) and then skipped, and the job goes on."""
        with self._lock:
            if task in self._failed:
                return
            try:
                if self._fits(task, line):
                    self._append(task, line)
            except OSError as exc:
                self._failed.add(task)
                if self._on_error is not None:
                    self._on_error(f"cannot write {self.path(task)}: {exc.strerror or exc}; "
                                   f"{task}'s output is no longer logged")

    def _fits(self, task: str, line: str) -> bool:
        """Whether ``line`` still fits in the task's log; the first that does not ends it with
        a note (written past the bound: it is short)."""
        if task in self.dropped:
            self.dropped[task] += 1
            return False
        size = len(line.encode("utf-8", "replace")) + 1
        written = self._bytes.get(task, 0)
        if written + size <= self.max_bytes:
            self._bytes[task] = written + size
            return True
        self.dropped[task] = 1
        note = (f"{self.path(task)} reached its bound of {self.max_bytes // 2**20} MiB: "
                f"{task}'s later output is not kept in it")
        self._append(task, f"[tfcluster] {note}")
        if self._on_error is not None:
            self._on_error(note)
        return False

    def _append(self, task: str, line: str) -> None:
        if self._closed:
            with open_appending(self.path(task)) as late:
                late.write(line + "\n")
            return
        handle = self._files.get(task)
        if handle is None:
            handle = self._files[task] = open_appending(self.path(task))
        handle.write(line + "\n")
        handle.flush()

    def close(self) -> None:
        with self._lock:
            self._closed = True
            for handle in self._files.values():
                with contextlib.suppress(OSError):
                    handle.close()
            self._files.clear()
