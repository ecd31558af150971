"""The figures of a run's steps, defined once (:mod:`launcher.run.step_figures`): the coordinator's
(the health watch, fed reports as they arrive) and the events' (folded by every view) are the same
numbers; steps/s is over a task's training time, not over a gap after it; a finished job's
attempts are restarted or succeeded, never left "restarting"."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any, cast

import pytest

from launcher.job.task_health import TaskHealthWatch
from launcher.job.tasks import TaskRuntime
from launcher.output.status import StatusBoard
from launcher.plan.planner import TaskPlan
from launcher.run.events import TaskProgress
from launcher.run.step_figures import AttemptState, run_steps, steps_lost
from launcher.spec.health import HealthSpec
from worker.wire.protocol import Exited, Heartbeat, Progress, Started, TaskUsage
from worker.wire.tfconfig import TaskId


def ev(ts: float, event: str, **fields: Any) -> dict[str, Any]:
    return {"ts": ts, "event": event, **fields}


def test_steps_lost_are_the_steps_reached_beyond_the_resumed_checkpoint() -> None:
    assert steps_lost(153, 150) == 3
    assert steps_lost(153, None) == 153  # restarted from the beginning
    assert steps_lost(148, 150) == 0  # it saved a newer checkpoint as it stopped
    assert steps_lost(None, 150) is None  # nothing reported: unknown


def test_the_events_give_each_attempt_its_state_reach_and_steps_lost() -> None:
    run = run_steps([
        ev(0.0, "attempt_started", attempt=0, resume_step=None),
        ev(0.1, "task_started", attempt=0, task="worker:0"),
        ev(1.0, "task_progress", attempt=0, task="worker:0", step=1, received_at=0.9),
        ev(5.0, "task_progress", attempt=0, task="worker:0", step=153, received_at=4.9),
        ev(5.5, "job_restarting", attempt=1)])
    assert run.attempts[0].state is AttemptState.RESTARTING
    run.add(ev(6.0, "attempt_started", attempt=1, resume_step=150))
    run.add(ev(9.0, "job_succeeded"))
    first, second = run.attempts
    assert (first.state, second.state) == (AttemptState.RESTARTED, AttemptState.SUCCEEDED)
    assert (first.reached, run.lost(0), run.lost(1)) == (153, 3, None)
    assert first.tasks["worker:0"].rate == pytest.approx(152 / 4.0)  # over received_at


def usage() -> Heartbeat:
    return Heartbeat(ts=0.0, tasks={"worker:0": TaskUsage(pid=1, cpu_percent=50.0,
                                                          rss_bytes=2**20)})


def test_steps_per_s_is_over_the_training_time_not_a_gap_after_it() -> None:
    # trains at 10 steps/s for 10 s, then waits 50 s (for a slow peer, a checkpoint) and exits
    events: list[Any] = []
    health = TaskHealthWatch(HealthSpec(straggler_window_s=10.0), emit=events.append,
                             warn=lambda _: None, interval_s=5.0)
    health.observe(0, "h", Started(task="worker:0", pid=1, ts=0.0), 0.0)
    for step in range(1, 101):
        health.observe(0, "h", Progress(task="worker:0", step=step, ts=step / 10), step / 10)
    health.observe(0, "h", usage(), 60.0)  # a job_health tick long after the last step
    health.observe(0, "h", Exited(task="worker:0", ts=60.0, exit_code=0), 60.5)
    rate = health.summary()["tasks"]["worker:0"]["steps_per_s"]
    assert rate == pytest.approx(99 / 9.9, abs=1e-3)
    health_events = [e for e in events if e.event_name == "job_health"]
    assert health_events[-1].tasks["worker:0"]["steps_per_s"] == pytest.approx(rate, abs=1e-3)


def test_the_last_report_before_an_exit_becomes_an_event_with_the_same_figures() -> None:
    runtime = TaskRuntime(cast(TaskPlan, SimpleNamespace(task=TaskId.parse("worker:0"))))
    written: list[TaskProgress] = []
    for step in range(1, 31):  # 10 reports a second: one event a second, and the last
        _first, event = runtime.progress(0, step, step / 10, 1.0)
        written += [event] if event is not None else []
    assert [e.step for e in written] == [1, 11, 21]  # the last report not (yet) among them
    written += runtime.unsent_progress(0)
    assert written[-1].step == 30 and written[-1].received_at == pytest.approx(3.0)
    assert runtime.unsent_progress(0) == []  # once
    records = [{"ts": e.received_at, "event": "task_progress", **e.record()} for e in written]
    run = run_steps([ev(0.0, "attempt_started", attempt=0), *records])
    assert run.attempts[0].tasks["worker:0"].rate == pytest.approx(29 / 2.9)


def test_a_rate_on_a_rounding_edge_shows_the_same_digits_in_every_view() -> None:
    # 49.2249...: rounded once to 3 decimals it is 49.225, which a view shows as 49.23 or 49.22
    # (binary floats); rounded twice (3 decimals for summary.json, 2 for the table) the views
    # disagreed in the last digit. The figure is kept to 3 decimals once, where it is defined.
    health = TaskHealthWatch(HealthSpec(), emit=lambda _: None, warn=lambda _: None,
                             interval_s=5.0)
    health.observe(0, "h", Started(task="worker:0", pid=1, ts=0.0), 0.0)
    span = 984.0 / 49.22496
    for at, step in ((0.0, 1), (span, 985)):
        health.observe(0, "h", Progress(task="worker:0", step=step, ts=at), at)
    summary = health.summary()["tasks"]["worker:0"]["steps_per_s"]
    events = [ev(0.0, "attempt_started", attempt=0),
              ev(0.0, "task_progress", attempt=0, task="worker:0", step=1, received_at=0.0),
              ev(span, "task_progress", attempt=0, task="worker:0", step=985, received_at=span)]
    board = StatusBoard()
    for event in events:
        board.apply(event)
    from_events = run_steps(events).attempts[0].tasks["worker:0"].rate
    assert summary == from_events == board.rows["worker:0"].rate == 49.225
    assert f"{summary:.2f}" == f"{board.rows['worker:0'].rate:.2f}"
