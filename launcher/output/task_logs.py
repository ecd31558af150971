"""Per-task log files of one attempt: ``attempt-<N>/<type>-<index>.log`` (stdout and stderr)."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TextIO

from launcher.run.directory import RunDir
from worker.wire.tfconfig import TaskId


class TaskLogs:
    """Thread-safe: each agent's reader thread writes its own tasks' lines as they arrive. Lines
    that come after :meth:`close` (an agent's last words) are still appended."""

    def __init__(self, run_dir: RunDir, attempt: int,
                 on_error: Callable[[str], None] | None = None) -> None:
        self._run_dir = run_dir
        self._attempt = attempt
        self._on_error = on_error
        self._failed: set[str] = set()  # tasks whose log cannot be written (disk full, ...)
        self._files: dict[str, TextIO] = {}
        self._lock = threading.Lock()
        self._closed = False
        run_dir.attempt_dir(attempt).mkdir(parents=True, exist_ok=True)

    def path(self, task: str) -> Path:
        return self._run_dir.task_log(self._attempt, TaskId.parse(task))

    def write(self, task: str, line: str) -> None:
        """Append one line; never raises: a log that cannot be written is reported once (through
        ``on_error``) and then skipped, and the job goes on."""
        with self._lock:
            if task in self._failed:
                return
            try:
                self._append(task, line)
            except OSError as exc:
                self._failed.add(task)
                if self._on_error is not None:
                    self._on_error(f"cannot write {self.path(task)}: {exc.strerror or exc}; "
                                   f"{task}'s output is no longer logged")

    def _append(self, task: str, line: str) -> None:
        if self._closed:
            with self.path(task).open("a", encoding="utf-8") as late:
                late.write(line + "\n")
            return
        handle = self._files.get(task)
        if handle is None:
            handle = self._files[task] = self.path(task).open("a", encoding="utf-8")
        handle.write(line + "\n")
        handle.flush()

    def close(self) -> None:
        with self._lock:
            self._closed = True
            for handle in self._files.values():
                with contextlib.suppress(OSError):
                    handle.close()
            self._files.clear()
