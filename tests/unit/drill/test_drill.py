"""A one-fault drill's figures (as the benchmarks read them) from scripted ``events.jsonl``
contents: :func:`launcher.drill.figures.run_figures`."""

from __future__ import annotations

from typing import Any

import pytest

from launcher.drill.figures import FaultFigures, RunFigures, run_figures

Event = dict[str, Any]


def ev(ts: float, event: str, **fields: Any) -> Event:
    return {"ts": ts, "event": event, **fields}


def progress(ts: float, task: str, step: int, attempt: int, first: bool = False) -> Event:
    return ev(ts, "task_progress", task=task, step=step, attempt=attempt, first=first,
              metrics={})


def fault(ts: float = 10.0, step: int = 100, attempt: int = 0) -> Event:
    return ev(ts, "fault_injected", task="worker:1", host="localhost", signal="SIGKILL", step=step,
              attempt=attempt)


def failed(ts: float, observed_at: float, task: str = "worker:1", attempt: int = 0,
           kind: str = "signalled") -> Event:
    return ev(ts, "task_failed", task=task, host="localhost", attempt=attempt, kind=kind,
              died_at=observed_at - 0.005, observed_at=observed_at, signal="SIGKILL")


def report(events: list[Event]) -> tuple[RunFigures, FaultFigures | None]:
    run = run_figures(events)
    return run, (run.faults[0] if run.faults else None)


def drill_run(*, injected_step: int = 100, resumed_step: int = 81,
              end: str | None = "job_succeeded") -> list[Event]:
    """A kill drill: worker:1 killed at ``injected_step``; attempt 1 starts at ``resumed_step``."""
    events = [
        ev(0.0, "job_started", job="digits", tasks=["chief:0", "worker:0", "worker:1"]),
        ev(0.5, "attempt_started", attempt=0),
        progress(1.0, "chief:0", 1, 0, first=True),
        progress(1.1, "worker:1", 1, 0, first=True),
        progress(9.9, "worker:1", injected_step, 0),
        fault(10.0, injected_step),
        failed(10.5, observed_at=10.02),
        progress(10.55, "chief:0", injected_step, 0),  # its last report, written at its exit
        failed(10.6, observed_at=10.6, task="chief:0", kind="exited"),
        ev(11.0, "job_restarting", attempt=1, reason="worker:1 failed"),
        ev(12.0, "attempt_started", attempt=1, resume_step=resumed_step - 1),
        progress(13.5, "chief:0", resumed_step, 1, first=True),
        progress(13.7, "worker:1", resumed_step, 1, first=True),
        progress(20.0, "worker:1", resumed_step + 50, 1),
    ]
    if end is not None:
        events.append(ev(30.0, end, job="digits"))
    return events


def test_a_kill_drill_report() -> None:
    run, result = report(drill_run())
    assert result is not None
    assert result.detection_s == pytest.approx(0.02)  # observed_at - injection, not the event ts
    assert result.recovery_s == pytest.approx(3.5)  # first step of the next attempt - injection
    assert result.steps_lost == 20  # steps 81..100 are done again
    assert run.restarts == 1
    assert run.outcome == "succeeded"
    assert result.detected_as == "signalled (worker:1)"
    assert result.resume_step == 80  # resumed at step 81


@pytest.mark.parametrize(("injected_step", "resumed_step", "lost"), [
    (100, 81, 20),  # checkpoint at 80
    (100, 1, 100),  # no checkpoint: from the beginning
    (100, 100, 1),  # checkpoint at 99: step 100 is done again
    (100, 101, 0),  # checkpoint at the very step of the fault
    (100, 150, 0),  # never negative
])
def test_steps_lost(injected_step: int, resumed_step: int, lost: int) -> None:
    _, result = report(drill_run(injected_step=injected_step, resumed_step=resumed_step))
    assert result is not None
    assert result.steps_lost == lost


def test_a_failure_before_the_fault_is_not_its_detection() -> None:
    events = drill_run()
    events.insert(3, failed(0.9, observed_at=0.9, task="worker:0", kind="exited"))
    _, result = report(events)
    assert result is not None
    assert result.detected_as == "signalled (worker:1)"
    assert result.detection_s == pytest.approx(0.02)


def test_only_the_first_step_of_a_later_attempt_is_recovery() -> None:
    events = drill_run()
    # A task of the faulted attempt taking its first step after the fault is not a recovery.
    events.insert(7, progress(10.7, "worker:0", 100, 0, first=True))
    _, result = report(events)
    assert result is not None
    assert result.recovery_s == pytest.approx(3.5)
    assert result.resume_step == 80  # resumed at step 81


def test_a_fault_in_a_later_attempt_counts_from_that_attempt() -> None:
    events = [
        ev(0.0, "attempt_started", attempt=0),
        progress(1.0, "worker:1", 1, 0, first=True),
        ev(2.0, "job_restarting", attempt=1),
        ev(3.0, "attempt_started", attempt=1),
        progress(4.0, "worker:1", 50, 1, first=True),  # before the fault: not a recovery
        fault(5.0, step=60, attempt=1),
        failed(5.2, observed_at=5.1),
        progress(5.21, "worker:1", 60, 1),  # its last report, written at its exit
        ev(6.0, "job_restarting", attempt=2),
        ev(7.0, "attempt_started", attempt=2, resume_step=55),
        progress(8.0, "worker:1", 56, 2, first=True),
        ev(9.0, "job_succeeded"),
    ]
    run, result = report(events)
    assert result is not None
    assert result.recovery_s == pytest.approx(3.0)
    assert result.steps_lost == 5
    assert run.restarts == 2


def test_no_restart_leaves_recovery_unknown() -> None:
    run = drill_run(end=None)
    gave_up = [e["event"] for e in run].index("job_restarting")
    events = [*run[:gave_up], ev(11.0, "job_failed", job="digits")]
    run, result = report(events)
    assert result is not None
    assert result.detection_s == pytest.approx(0.02)
    assert result.recovery_s is None
    assert result.steps_lost is None
    assert run.restarts == 0
    assert result.resume_step is None


def test_a_fault_never_injected_says_so() -> None:
    events = [e for e in drill_run() if e["event"] != "fault_injected"]
    run, result = report(events)
    assert result is None
    assert run.faults == ()
    assert run.outcome == "succeeded"


@pytest.mark.parametrize(("ends", "outcome"), [
    (["job_succeeded"], "succeeded"),
    (["job_failed"], "failed"),
    ([], "unfinished"),
])
def test_outcome(ends: list[str], outcome: str) -> None:
    events = drill_run(end=None) + [ev(40.0 + i, end) for i, end in enumerate(ends)]
    run, _ = report(events)
    assert run.outcome == outcome
