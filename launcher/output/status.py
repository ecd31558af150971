"""Live status of the job, built from the event stream alone.

On a terminal a rich table redraws in place under the task output: per task its host, state,
step, steps/s, CPU %, RSS, restarts and a note (straggler, memory high); the title names the slowest
task. Elsewhere (CI logs, files) the same facts come as plain lines: one per state change, and a
progress line every ``PLAIN_PROGRESS_INTERVAL_S``. CPU and RSS come from the ``job_health`` events
(:mod:`launcher.job.task_health`); a new attempt clears every task's step and figures, so nothing of
the attempt before is shown as if it were current.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from launcher.output.console import Console
from launcher.run.events import EventType
from launcher.run.step_figures import TaskSteps, arrived_at
from worker.wire.tfconfig import TASK_TYPES, TaskId, TFConfigError, task_order

PLAIN_PROGRESS_INTERVAL_S = 10.0
#: A straggler's note in the table, by the ``cause`` of its ``task_straggling`` event.
_STRAGGLER_NOTES = {"slow_steps": "straggler", "starved": "straggler: starved of CPU",
                    "more_work": "straggler: more work"}


@dataclass
class TaskRow:
    task: str
    host: str = "-"
    state: str = "pending"
    step: int | None = None
    restarts: int = 0
    #: Its step and steps/s, as every view counts them (:mod:`launcher.run.step_figures`).
    life: TaskSteps = field(default_factory=TaskSteps)
    cpu_percent: float | None = None
    rss_bytes: int | None = None
    #: Why it is a straggler (None: it is not): see ``_STRAGGLER_NOTES``.
    straggler: str | None = None
    memory_high: bool = False

    def new_attempt(self, attempt: int) -> None:
        self.state, self.restarts, self.life, self.step = "starting", attempt, TaskSteps(), None
        self.cpu_percent = self.rss_bytes = None
        self.straggler, self.memory_high = None, False

    @property
    def note(self) -> str:
        notes = [] if self.straggler is None else [self.straggler]
        return ", ".join(notes + (["memory high"] if self.memory_high else []))

    def record(self, at: float, step: int) -> None:
        self.step = step
        self.life.add(at, step)

    @property
    def rate(self) -> float | None:
        """Its steps over its training time in this life (its first report to its last)."""
        return self.life.rate


class StatusBoard:
    """Folds events into one row per task."""

    def __init__(self) -> None:
        self.rows: dict[str, TaskRow] = {}
        self.attempt = 0
        self.job_state = "starting"
        self.slowest: str | None = None
        #: A lock-step job's straggler and why, as the last ``job_health`` said.
        self.held_back_by: str | None = None

    def row(self, task: str) -> TaskRow:
        if task not in self.rows:
            self.rows[task] = TaskRow(task)
        return self.rows[task]

    def apply(self, event: dict[str, Any]) -> None:
        kind = event["event"]
        task = event.get("task")
        if kind == EventType.JOB_STARTED:
            for name in event.get("tasks", []):
                self.row(name)
        elif kind == "attempt_placed":  # a pool job: this attempt's tasks, where they run
            placement: dict[str, str] = event.get("placement") or {}
            rows = {name: self.row(name) for name in placement}
            for name, host in placement.items():
                rows[name].host = host
            self.rows = rows
        elif kind == EventType.ATTEMPT_STARTED:
            self.attempt = int(event["attempt"])
            self.job_state = "running"
            self.slowest = self.held_back_by = None
            for row in self.rows.values():
                row.new_attempt(self.attempt)
        elif kind == EventType.TASK_STARTED and task:
            self.row(task).host = str(event.get("host", "-"))
            self.row(task).state, self.row(task).life = "running", TaskSteps()  # a new process
        elif kind == EventType.TASK_PROGRESS and task:
            self.row(task).record(arrived_at(event), int(event["step"]))
        elif kind == EventType.TASK_EXITED and task:
            self.row(task).state = "stopped" if event.get("stopped") else "done"
        elif kind == EventType.TASK_FAILED and task in self.rows:
            self.row(task).state = f"failed ({event.get('kind')})"
        elif kind == "task_restarted" and task:  # a parameter_server job's task, alone
            for name in (task, *event.get("together", ())):
                self.row(name).restarts += 1
                self.row(name).state = "restarting"
        elif kind == "task_left_out" and task:
            self.row(task).state = "left out"
        elif kind == EventType.JOB_HEALTH and int(event.get("attempt", 0)) == self.attempt:
            self._health(event)
        elif kind == EventType.TASK_STRAGGLING and task in self.rows:
            self.row(task).straggler = _STRAGGLER_NOTES.get(
                str(event.get("cause")), "straggler") if event.get("straggling") else None
        elif kind == EventType.TASK_MEMORY_HIGH and task in self.rows:
            self.row(task).memory_high = True
        elif kind in (EventType.JOB_STOPPING, EventType.JOB_RESTARTING, EventType.JOB_SUCCEEDED,
                      EventType.JOB_FAILED):
            self.job_state = kind.removeprefix("job_")

    def _health(self, event: dict[str, Any]) -> None:
        self.slowest = event.get("slowest")
        self.held_back_by = event.get("held_back_by")
        for name, figures in (event.get("tasks") or {}).items():
            row = self.row(name)
            row.cpu_percent = figures.get("cpu_percent")
            row.rss_bytes = figures.get("rss_bytes")

    def ordered(self) -> list[TaskRow]:
        """Chief, workers by index (worker:2 before worker:10), evaluator."""
        def key(row: TaskRow) -> tuple[int, int]:
            try:
                return task_order(TaskId.parse(row.task))
            except TFConfigError:
                return len(TASK_TYPES), 0

        return sorted(self.rows.values(), key=key)

    def table(self) -> Any:
        from rich.table import Table

        slowest = "" if self.slowest is None else f" — slowest {self.slowest}"
        table = Table(title=f"attempt {self.attempt} — {self.job_state}{slowest}",
                      title_justify="left", expand=False)
        for column in ("task", "host", "state", "step", "steps/s", "cpu %", "rss", "restarts",
                       "note"):
            table.add_column(column, justify="left" if column in ("task", "host", "state", "note")
                             else "right")
        for row in self.ordered():
            rate = row.rate
            table.add_row(row.task, row.host, row.state, "-" if row.step is None else str(row.step),
                          "-" if rate is None else f"{rate:.1f}",
                          "-" if row.cpu_percent is None else f"{row.cpu_percent:.0f}",
                          _size(row.rss_bytes), str(row.restarts), row.note)
        if self.held_back_by:
            table.caption, table.caption_justify = f"straggler: {self.held_back_by}", "left"
        return table

    def progress_line(self) -> str:
        parts = []
        for row in self.ordered():
            rate = row.rate
            parts.append(f"{row.task} {row.state} step {'-' if row.step is None else row.step}"
                         + ("" if rate is None else f" ({rate:.1f}/s)")
                         + (f" [{row.note}]" if row.note else ""))
        slowest = "" if self.slowest is None else f"; slowest {self.slowest}"
        held = "" if self.held_back_by is None else f"; straggler: {self.held_back_by}"
        return f"attempt {self.attempt}: " + ", ".join(parts) + slowest + held


def _size(size: int | None) -> str:
    if size is None:
        return "-"
    return f"{size / 2**30:.1f}G" if size >= 2**30 else f"{size / 2**20:.0f}M"


class PlainStatus:
    """Status as log lines for a non-terminal: progress at most every few seconds."""

    def __init__(self, console: Console, board: StatusBoard) -> None:
        self.console = console
        self.board = board
        self.last = time.monotonic()

    def __call__(self, event: dict[str, Any]) -> None:
        self.board.apply(event)
        now = time.monotonic()
        if event["event"] == EventType.TASK_PROGRESS and now - self.last >= PLAIN_PROGRESS_INTERVAL_S:
            self.last = now
            self.console.progress(self.board.progress_line())
