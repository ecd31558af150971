"""The live status board folded from a scripted event stream: rows, rates, the table, the line."""

from __future__ import annotations

import io
import re
from collections.abc import Callable
from typing import Any

import pytest
from rich.console import Console as RichConsole

from launcher.output.status import StatusBoard

Event = dict[str, Any]
TASKS = ["chief:0", "worker:0", "worker:1"]


def ev(event: str, ts: float = 0.0, **fields: Any) -> Event:
    return {"ts": ts, "event": event, **fields}


def board_after(*events: Event) -> StatusBoard:
    board = StatusBoard()
    for event in events:
        board.apply(event)
    return board


def started(attempt: int = 0) -> list[Event]:
    return [
        ev("attempt_started", attempt=attempt),
        ev("task_started", task="chief:0", host="node-a", attempt=attempt),
        ev("task_started", task="worker:0", host="node-b", attempt=attempt),
        ev("task_started", task="worker:1", host="node-b", attempt=attempt),
    ]


def progress(task: str, ts: float, step: int) -> Event:
    return ev("task_progress", ts=ts, task=task, step=step, metrics={}, first=False)


def running_job() -> list[Event]:
    """chief:0 at 10 steps/s, worker:0 failed, worker:1 started but no step yet."""
    return [
        ev("job_started", tasks=TASKS),
        *started(),
        progress("chief:0", 100.0, 10),
        progress("chief:0", 101.0, 20),
        progress("chief:0", 102.0, 30),
        ev("task_failed", task="worker:0", host="node-b", kind="exited", exit_code=1),
    ]


def rows(board: StatusBoard) -> dict[str, tuple[str, str, int | None, int]]:
    return {name: (row.host, row.state, row.step, row.restarts) for name, row in board.rows.items()}


def test_job_started_lists_every_task_as_pending() -> None:
    board = board_after(ev("job_started", tasks=TASKS))
    assert rows(board) == {t: ("-", "pending", None, 0) for t in TASKS}
    assert board.job_state == "starting"


def test_rows_follow_the_events() -> None:
    board = board_after(*running_job())
    assert rows(board) == {
        "chief:0": ("node-a", "running", 30, 0),
        "worker:0": ("node-b", "failed (exited)", None, 0),
        "worker:1": ("node-b", "running", None, 0),
    }
    assert board.rows["chief:0"].rate == pytest.approx(10.0)
    assert board.rows["worker:1"].rate is None
    assert (board.attempt, board.job_state) == (0, "running")


@pytest.mark.parametrize(("kind", "state"), [
    ("hung", "failed (hung)"),
    ("lost_host", "failed (lost_host)"),
    ("startup_timeout", "failed (startup_timeout)"),
])
def test_task_failed_shows_the_kind(kind: str, state: str) -> None:
    board = board_after(ev("job_started", tasks=TASKS), *started(),
                        ev("task_failed", task="worker:1", kind=kind))
    assert board.rows["worker:1"].state == state


@pytest.mark.parametrize(("fields", "state"), [
    ({"exit_code": 0}, "done"),
    ({"exit_code": -15, "signal": "SIGTERM", "stopped": True}, "stopped"),
])
def test_task_exited(fields: dict[str, Any], state: str) -> None:
    board = board_after(ev("job_started", tasks=TASKS), *started(),
                        ev("task_exited", task="worker:0", **fields))
    assert board.rows["worker:0"].state == state


def test_attempt_started_resets_states_and_counts_restarts() -> None:
    board = board_after(*running_job(), ev("job_stopping", reason="worker:0 failed"),
                        ev("job_restarting", attempt=1))
    assert board.job_state == "restarting"
    board.apply(ev("attempt_started", attempt=1))
    assert {name: (row.state, row.restarts, row.rate) for name, row in board.rows.items()} == {
        t: ("starting", 1, None) for t in TASKS}
    assert (board.attempt, board.job_state) == (1, "running")
    for event in started(1)[1:]:
        board.apply(event)
    assert {row.state for row in board.rows.values()} == {"running"}
    assert {row.restarts for row in board.rows.values()} == {1}


def test_the_rate_of_a_new_attempt_ignores_the_old_one() -> None:
    board = board_after(*running_job(), ev("attempt_started", attempt=1), *started(1)[1:],
                        progress("chief:0", 200.0, 21), progress("chief:0", 202.0, 25))
    assert board.rows["chief:0"].rate == pytest.approx(2.0)
    assert board.rows["chief:0"].step == 25


def test_the_rate_is_the_steps_over_the_training_time_of_the_attempt() -> None:
    # as status, summary.json and TensorBoard count it (launcher.run.step_figures)
    fast = [progress("chief:0", float(t), 10 * t) for t in range(6)]  # 10/s until t=5
    slow = [progress("chief:0", float(t), 50 + (t - 5)) for t in range(6, 16)]  # then 1/s
    board = board_after(ev("job_started", tasks=TASKS), *started(), *fast, *slow)
    assert board.rows["chief:0"].rate == pytest.approx(60 / 15)
    assert board.rows["chief:0"].step == 60


@pytest.mark.parametrize("event", ["job_stopping", "job_restarting", "job_succeeded", "job_failed"])
def test_job_state(event: str) -> None:
    board = board_after(*running_job(), ev(event))
    assert board.job_state == event.removeprefix("job_")


def render(board: StatusBoard) -> str:
    console = RichConsole(record=True, width=100, file=io.StringIO(), color_system=None)
    console.print(board.table())
    return console.export_text()


def cells(text: str, task: str) -> list[str]:
    """The cells of the table row of ``task``."""
    (line,) = [line for line in text.splitlines() if re.search(rf"[│┃|]\s*{task}\s*[│┃|]", line)]
    return [cell.strip() for cell in re.split(r"[│┃|]", line)[1:-1]]


def test_table() -> None:
    text = render(board_after(*running_job()))
    assert text.splitlines()[0].strip() == "attempt 0 — running"
    header = next(line for line in text.splitlines() if "task" in line and "host" in line)
    assert [c.strip() for c in re.split(r"[│┃|]", header)[1:-1]] == [
        "task", "host", "state", "step", "steps/s", "cpu %", "rss", "restarts", "note"]
    assert cells(text, "chief:0") == ["chief:0", "node-a", "running", "30", "10.0", "-", "-", "0",
                                      ""]
    assert cells(text, "worker:0") == ["worker:0", "node-b", "failed (exited)", "-", "-", "-", "-",
                                       "0", ""]
    assert cells(text, "worker:1") == ["worker:1", "node-b", "running", "-", "-", "-", "-", "0", ""]


def test_table_after_a_restart() -> None:
    text = render(board_after(*running_job(), ev("attempt_started", attempt=2)))
    assert text.splitlines()[0].strip() == "attempt 2 — running"
    assert cells(text, "worker:0")[2:] == ["starting", "-", "-", "-", "-", "2", ""]
    # the chief reached step 30 in attempt 0: attempt 2 has no step yet, and says so
    assert cells(text, "chief:0")[2:] == ["starting", "-", "-", "-", "-", "2", ""]


def test_progress_line() -> None:
    assert board_after(*running_job()).progress_line() == (
        "attempt 0: chief:0 running step 30 (10.0/s), worker:0 failed (exited) step -, "
        "worker:1 running step -")


def progress_line_order(board: StatusBoard) -> list[str]:
    line = board.progress_line().removeprefix(f"attempt {board.attempt}: ")
    return [part.split()[0] for part in line.split(", ")]


def table_order(board: StatusBoard) -> list[str]:
    return [line.split("│")[1].strip() for line in render(board).splitlines()
            if re.search(r"│\s*(chief|worker):\d+\s*│", line)]


@pytest.mark.parametrize("order", [progress_line_order, table_order])
def test_rows_are_in_task_order(order: Callable[[StatusBoard], list[str]]) -> None:
    # worker:2 comes before worker:10, as a user reading the table expects.
    tasks = ["chief:0", *(f"worker:{i}" for i in range(12))]
    assert order(board_after(ev("job_started", tasks=list(reversed(tasks))))) == tasks


def test_a_pool_attempt_shows_only_its_own_tasks_on_their_new_hosts() -> None:
    board = board_after(*running_job(),
                        ev("attempt_placed", attempt=1, workers=2, max_workers=3,
                           placement={"chief:0": "node-a", "worker:0": "node-c"}, spares=[],
                           left_out={"node-b": "its agent was lost"}),
                        ev("attempt_started", attempt=1))
    assert rows(board) == {"chief:0": ("node-a", "starting", None, 1),
                           "worker:0": ("node-c", "starting", None, 1)}
