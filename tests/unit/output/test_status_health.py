"""The live view shows per-task health from the events: CPU %, RSS, the slowest task, stragglers
and memory warnings; a new attempt shows its own steps, never the last attempt's."""

from __future__ import annotations

import io
import re
from typing import Any

from rich.console import Console as RichConsole

from launcher.output.status import StatusBoard

TASKS = ["worker:0", "worker:1", "worker:2"]


def ev(event: str, ts: float = 0.0, **fields: Any) -> dict[str, Any]:
    return {"ts": ts, "event": event, **fields}


def running(attempt: int = 0) -> list[dict[str, Any]]:
    return [ev("attempt_started", attempt=attempt),
            *[ev("task_started", task=t, host="node-a", attempt=attempt) for t in TASKS]]


def health(attempt: int = 0, slowest: str | None = "worker:2") -> dict[str, Any]:
    figures = {t: {"host": "node-a", "step": 10, "steps_per_s": 5.0, "cpu_percent": 50.0 + i,
                   "rss_bytes": (100 + i) * 2**20, "available_bytes": 2**33}
               for i, t in enumerate(TASKS)}
    return ev("job_health", attempt=attempt, tasks=figures, steps_per_s=1.0, slowest=slowest,
              stragglers=["worker:2"])


def board_after(*events: dict[str, Any]) -> StatusBoard:
    board = StatusBoard()
    board.apply(ev("job_started", tasks=TASKS))
    for event in events:
        board.apply(event)
    return board


def render(board: StatusBoard) -> str:
    console = RichConsole(record=True, width=120, file=io.StringIO(), color_system=None)
    console.print(board.table())
    return console.export_text()


def cells(text: str, task: str) -> list[str]:
    (line,) = [line for line in text.splitlines() if re.search(rf"│\s*{task}\s*│", line)]
    return [cell.strip() for cell in line.split("│")[1:-1]]


def test_cpu_rss_slowest_and_straggler_are_shown() -> None:
    board = board_after(*running(), health(),
                        ev("task_straggling", attempt=0, task="worker:2", straggling=True),
                        ev("task_memory_high", attempt=0, task="worker:1", host="node-a"))
    text = render(board)
    assert "slowest worker:2" in text.splitlines()[0]
    assert cells(text, "worker:0")[5:7] == ["50", "100M"]
    assert cells(text, "worker:2")[-1] == "straggler"
    assert cells(text, "worker:1")[-1] == "memory high"
    line = board.progress_line()
    assert "worker:2 running step - [straggler]" in line
    assert line.endswith("; slowest worker:2")


def test_a_straggler_that_catches_up_is_no_longer_flagged() -> None:
    board = board_after(*running(), ev("task_straggling", task="worker:2", straggling=True),
                        ev("task_straggling", task="worker:2", straggling=False))
    assert board.rows["worker:2"].note == ""


def test_a_new_attempt_clears_steps_figures_and_flags() -> None:
    progress = [ev("task_progress", ts=100.0 + i, task=t, step=134 + i, metrics={}, first=False)
                for i in range(2) for t in TASKS]
    board = board_after(*running(0), *progress, health(0),
                        ev("task_straggling", task="worker:2", straggling=True),
                        *running(1))
    assert {row.step for row in board.rows.values()} == {None}
    assert board.slowest is None
    assert all(row.note == "" and row.cpu_percent is None for row in board.rows.values())
    assert board.progress_line() == ("attempt 1: worker:0 running step -, worker:1 running step -, "
                                     "worker:2 running step -")
    board.apply(ev("task_progress", ts=200.0, task="worker:0", step=151, metrics={}, first=True))
    assert "worker:0 running step 151" in board.progress_line()


def test_health_of_an_earlier_attempt_is_ignored() -> None:
    board = board_after(*running(0), *running(1), health(0))
    assert board.rows["worker:0"].cpu_percent is None
