"""A drill on a parameter_server job, from scripted ``events.jsonl`` contents: what each fault cost
when tasks were restarted inside the attempt (:mod:`launcher.drill.task_recovery`), and the one
line per fault whose job restarted other tasks than it should
(:mod:`launcher.drill.expected_restarts`)."""

from __future__ import annotations

import pytest

from launcher.drill.expected_restarts import restart_problems
from launcher.drill.figures import run_figures
from tests.support.ps_events import (
    CHIEF,
    Event,
    chief_kill,
    ev,
    failed,
    injected,
    progress,
    ps_kill,
    restarted,
    run,
    started,
    worker_kill,
)

#: name -> (events, restarted, detection, teardown, recovery, resume step, steps lost)
FIGURES: dict[str, tuple[list[Event], tuple[str, ...], float, float | None, float, int | None,
                         int]] = {
    # the worker alone, back 0.5 s after the kill; the chief trained on: nothing lost
    "worker": (worker_kill(), ("worker:1",), 0.004, None, 0.5, None, 0),
    # the ps and the chief; the chief stopped 8 ms after the detection, training 0.7 s after the
    # kill from its checkpoint at the very step of the kill
    "ps": (ps_kill(), ("ps:0", CHIEF), 0.002, 0.008, 0.7, 20, 0),
    # the chief alone, from step 20 when it had reached 25
    "chief": (chief_kill(), (CHIEF,), 0.003, None, 0.6, 20, 5),
    # no checkpoint: the chief starts from the beginning and every step is lost
    "chief, no checkpoint": (chief_kill(resume_step=None), (CHIEF,), 0.003, None, 0.6, 0, 25),
}


@pytest.mark.parametrize("name", FIGURES)
def test_figures_of_a_fault_that_restarted_tasks(name: str) -> None:
    events, tasks, detection, teardown, recovery, resume_step, lost = FIGURES[name]
    figures = run_figures(events)
    fault, = figures.faults
    assert fault.restarted == tasks
    assert fault.detection_s == pytest.approx(detection)
    assert fault.teardown_s == (None if teardown is None else pytest.approx(teardown))
    assert fault.recovery_s == pytest.approx(recovery)
    assert (fault.resume_step, fault.steps_lost) == (resume_step, lost)
    assert (figures.restarts, figures.task_restarts, figures.outcome) == (0, 1, "succeeded")


def test_a_fault_that_restarted_the_whole_job_has_the_attempts_figures() -> None:
    """A hung chief stops the whole attempt even in a parameter_server job."""
    events = run(injected(2.0, CHIEF, 20, action="stop"),
                 ev(4.0, "task_failed", attempt=0, task=CHIEF, kind="hung", observed_at=4.0),
                 ev(4.5, "job_restarting", attempt=1),
                 ev(5.0, "attempt_started", attempt=1, resume_step=20),
                 ev(5.2, "task_progress", attempt=1, task=CHIEF, step=21, first=True))
    figures = run_figures(events)
    fault, = figures.faults
    assert fault.restarted == ()
    assert (fault.detection_s, fault.teardown_s, fault.recovery_s) == pytest.approx((2.0, 0.5,
                                                                                     3.2))
    assert (fault.resume_step, fault.steps_lost) == (20, 0)
    assert (figures.restarts, figures.task_restarts) == (1, 0)


def test_a_task_restart_after_the_job_restarted_is_not_the_faults() -> None:
    events = run(injected(2.0, "worker:1", 19), failed(2.004, "worker:1"),
                 ev(2.5, "job_restarting", attempt=1), restarted(3.0, "worker:1"))
    fault, = run_figures(events).faults
    assert fault.restarted == ()


# --- what the drill expects ------------------------------------------------------------------

EXPECTATIONS: dict[str, tuple[list[Event], bool, list[str]]] = {
    "worker restarted alone": (worker_kill(), True, []),
    "ps restarted with the chief": (ps_kill(), True, []),
    "chief restarted alone": (chief_kill(), True, []),
    "the chief started again after a worker's kill": (worker_kill(chief_again=True), True, [
        "kill:worker:1:after=2: the chief was started again (pid 11 → 12): a worker's failure "
        "must leave it training"]),
    "a ps restarted without the chief": (ps_kill(together=()), True, [
        "kill:ps:0:after=2: restarted ps:0; expected ps:0 and chief:0"]),
    "a ps whose chief resumed from no checkpoint": (ps_kill(resume_step=None), True, [
        "kill:ps:0:after=2: the chief started again from the beginning although the job writes "
        "checkpoints (none was found: a fault before the chief's first checkpoint proves nothing "
        "about resuming)"]),
    "no checkpoints: from the beginning by design": (ps_kill(resume_step=None), False, []),
    "a chief restarted from no checkpoint": (chief_kill(resume_step=None), True, [
        "kill:chief:0:after=2: the chief started again from the beginning although the job writes "
        "checkpoints (none was found: a fault before the chief's first checkpoint proves nothing "
        "about resuming)"]),
    "the whole job restarted": (run(
        injected(2.0, "worker:1", 19), failed(2.004, "worker:1"),
        ev(2.5, "job_restarting", attempt=1), ev(3.0, "attempt_started", attempt=1)), True, [
        "kill:worker:1:after=2: the whole job was restarted instead of worker:1 alone inside "
        "the attempt"]),
    "the worker left out": (run(
        injected(2.0, "worker:1", 19), failed(2.004, "worker:1"),
        ev(2.005, "task_left_out", attempt=0, task="worker:1", host="h", reason="crash loop")),
        True, ["kill:worker:1:after=2: worker:1 was left out instead of restarted (expected "
               "worker:1 alone)"]),
    "nothing restarted": (run(injected(2.0, "ps:0", 20)), True, [
        "kill:ps:0:after=2: no task was restarted for it (expected ps:0 and chief:0)"]),
    "a hang is not a task restart's to judge": (run(injected(2.0, "worker:1", 19, "stop")),
                                                True, []),
}


@pytest.mark.parametrize("name", EXPECTATIONS)
def test_which_tasks_a_fault_must_restart(name: str) -> None:
    events, checkpointing, problems = EXPECTATIONS[name]
    assert restart_problems(run_figures(events).faults, events,
                            checkpointing=checkpointing) == problems


def test_each_fault_is_judged_up_to_the_next() -> None:
    """A chief killed after a worker was: its restart is the chief fault's, not the worker's."""
    events = run(injected(2.0, "worker:1", 19), failed(2.004, "worker:1"),
                 restarted(2.005, "worker:1"), started(2.5, "worker:1", 23),
                 injected(3.0, CHIEF, 30), failed(3.003, CHIEF),
                 restarted(3.004, CHIEF, (), 30), started(3.5, CHIEF, 12),
                 progress(3.6, 31, first=True))
    worker, chief = run_figures(events).faults
    assert (worker.restarted, chief.restarted) == (("worker:1",), (CHIEF,))
    assert (chief.resume_step, chief.steps_lost) == (30, 0)
    assert restart_problems((worker, chief), events, checkpointing=True) == []
