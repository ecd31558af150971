"""The run directory: ``events.jsonl``, ``attempt-<N>/<type>-<index>.log`` and ``summary.json``."""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from worker.tfconfig import TaskId


def default_run_dir(job: str, base: str = "runs", now: float | None = None) -> Path:
    """``runs/<job>-<YYYYmmdd-HHMMSS>``, with a numeric suffix if that already exists."""
    stamp = time.strftime("%Y%m%d-%H%M%S", time.localtime(now))
    candidate = Path(base) / f"{job}-{stamp}"
    suffix = 1
    while candidate.exists():
        suffix += 1
        candidate = Path(base) / f"{job}-{stamp}-{suffix}"
    return candidate


@dataclass(frozen=True)
class RunDir:
    path: Path

    def create(self) -> None:
        self.path.mkdir(parents=True, exist_ok=True)

    @property
    def events(self) -> Path:
        return self.path / "events.jsonl"

    @property
    def summary(self) -> Path:
        return self.path / "summary.json"

    def attempt_dir(self, attempt: int) -> Path:
        return self.path / f"attempt-{attempt}"

    def task_log(self, attempt: int, task: TaskId) -> Path:
        return self.attempt_dir(attempt) / f"{task.file_stem}.log"

    def agent_log(self, attempt: int, host: str) -> Path:
        return self.attempt_dir(attempt) / f"agent-{host}.log"

    def write_summary(self, summary: dict[str, Any]) -> None:
        tmp = self.summary.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(summary, indent=2, sort_keys=True) + "\n")
        os.replace(tmp, self.summary)
