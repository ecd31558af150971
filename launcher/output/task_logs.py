"""Per-task log files of one attempt: ``attempt-<N>/<type>-<index>.log`` (stdout and stderr)."""

from __future__ import annotations

from pathlib import Path
from typing import TextIO

from launcher.output.rundir import RunDir
from worker.tfconfig import TaskId


class TaskLogs:
    def __init__(self, run_dir: RunDir, attempt: int) -> None:
        self._run_dir = run_dir
        self._attempt = attempt
        self._files: dict[str, TextIO] = {}
        run_dir.attempt_dir(attempt).mkdir(parents=True, exist_ok=True)

    def path(self, task: str) -> Path:
        return self._run_dir.task_log(self._attempt, TaskId.parse(task))

    def write(self, task: str, line: str) -> None:
        handle = self._files.get(task)
        if handle is None:
            handle = self._files[task] = self.path(task).open("a", encoding="utf-8")
        handle.write(line + "\n")
        handle.flush()

    def close(self) -> None:
        for handle in self._files.values():
            handle.close()
        self._files.clear()
