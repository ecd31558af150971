"""The task holding a lock-step job back, on scripted figures: starved of CPU, doing more work per
step, or no one (balanced, everyone equally crowded, too little to compare); named after two looks
in a row and cleared after two without; through the watch, events and job_health carry it."""

from __future__ import annotations

from typing import Any

import pytest

from launcher.job.lockstep import Cause, Figures, LockstepWatch, UsageWindow, judge
from launcher.job.task_health import TaskHealthWatch
from launcher.run.events import JobHealth, TaskStraggling
from launcher.spec.health import HealthSpec
from worker.wire.protocol import Heartbeat, Progress, Started, TaskUsage


def shared(cpu: float, share: float) -> Figures:
    """The figures of a task using ``cpu`` cores that waits ``share`` of the time it has work."""
    return Figures(cpu=cpu, wait=cpu * share / (1 - share))


def figures(*rows: tuple[float, float]) -> dict[str, Figures]:
    return {f"worker:{i}": shared(cpu, share) for i, (cpu, share) in enumerate(rows)}


@pytest.mark.parametrize(("rows", "named"), [
    # balanced
    ([(0.9, 0.05), (0.9, 0.06), (0.95, 0.04)], None),
    # an oversubscribed host: everyone waits alike
    ([(0.6, 0.45), (0.6, 0.5), (0.55, 0.48)], None),
    # worker:1 shares its core with a CPU hog
    ([(0.5, 0.04), (0.5, 0.62), (0.5, 0.05)], ("worker:1", Cause.STARVED)),
    # just over the others, not starved
    ([(0.5, 0.10), (0.5, 0.22), (0.5, 0.09)], None),
    # measured here: TF tasks on 2 cores, balanced; then one with a fifth of a core (cgroup quota)
    ([(0.56, 0.71), (0.51, 0.67), (0.50, 0.68)], None),
    ([(0.22, 0.72), (0.20, 0.93), (0.19, 0.66)], ("worker:1", Cause.STARVED)),
    # worker:2 does twice the work per step
    ([(0.4, 0.02), (0.4, 0.03), (0.8, 0.04)], ("worker:2", Cause.MORE_WORK)),
    # 1.3x: not enough to name
    ([(0.4, 0.02), (0.52, 0.03), (0.4, 0.04)], None),
    # nobody does anything worth comparing
    ([(0.01, 0.0), (0.03, 0.5), (0.01, 0.0)], None),
    # two tasks on one crowded core, one on a free one: no single task explains it
    ([(0.5, 0.5), (0.5, 0.5), (0.5, 0.02)], None),
    # one task alone: nothing to compare with
    ([(0.9, 0.7)], None),
])
def test_judge_names_one_task_and_why_or_no_one(rows: list[tuple[float, float]],
                                                 named: tuple[str, Cause] | None) -> None:
    verdict = judge(figures(*rows))
    assert (None if verdict is None else (verdict.task, verdict.cause)) == named


def test_a_task_that_barely_runs_is_not_called_starved() -> None:
    # a script sleeping between steps: no CPU at all, a few microseconds of waiting
    idle = {"worker:0": Figures(0.01, 0.004), "worker:1": Figures(0.01, 0.003),
            "worker:2": Figures(0.0, 0.00001)}
    assert judge(idle) is None




def test_the_texts_say_what_a_person_can_act_on() -> None:
    starved = judge(figures((0.5, 0.04), (0.5, 0.62), (0.5, 0.06)))
    assert starved is not None
    assert starved.text("h2").startswith(
        "worker:1 on h2: starved of CPU (waits for a core 62% of the time it has work, the "
        "others 5%)")
    more = judge(figures((0.4, 0.0), (0.4, 0.0), (0.72, 0.0)))
    assert more is not None
    assert more.text("h3", step_s=0.02).startswith(
        "worker:2 on h3 does 1.8x the others' work per step (0.72 CPU cores against 0.40; "
        "14 ms of CPU per step against 8 ms)")


def test_usage_window_needs_half_a_window_and_restarts_with_a_new_process() -> None:
    window = UsageWindow(window_s=10.0)
    window.add(0.0, 0.0, 0.0)
    window.add(4.0, 2.0, 2.0)
    assert window.figures() is None  # 4 s < half the window
    window.add(6.0, 3.0, 3.0)
    got = window.figures()
    assert got is not None and got.cpu == pytest.approx(0.5) and got.wait_share == pytest.approx(0.5)
    for t in range(7, 30):
        window.add(float(t), 3.0 + (t - 6) * 0.9, 3.0)  # 0.9 cores, no more waiting
    got = window.figures()
    assert got is not None and got.cpu == pytest.approx(0.9) and got.wait_share == 0.0
    window.add(30.0, 0.1, 0.0)  # CPU time went down: a new process
    assert window.figures() is None


def test_named_after_two_looks_and_cleared_after_two_without() -> None:
    watch = LockstepWatch()
    starved = figures((0.5, 0.04), (0.5, 0.62), (0.5, 0.05))
    fine = figures((0.5, 0.04), (0.5, 0.05), (0.5, 0.05))
    assert watch.look(starved) == (None, False)
    verdict, changed = watch.look(starved)
    assert changed and verdict is not None and verdict.task == "worker:1"
    assert watch.look(starved)[1] is False
    kept, changed = watch.look(fine)  # one look without: still named
    assert not changed and kept is not None and kept.task == "worker:1"
    assert watch.look(fine) == (None, True)
    assert watch.look(starved) == (None, False)  # one look again: not yet


# --- through the watch, fed heartbeats at scripted times ------------------------------------

def usage(pid: int, cpu: float, wait: float) -> TaskUsage:
    return TaskUsage(pid=pid, cpu_percent=50.0, rss_bytes=1 << 20, cpu_seconds=cpu,
                     wait_seconds=wait)


def run_watch(wait_per_s: dict[str, float], seconds: int, *, report: bool = True,
              lockstep: bool = True) -> tuple[TaskHealthWatch, list[Any], list[str]]:
    events: list[Any] = []
    lines: list[str] = []
    watch = TaskHealthWatch(HealthSpec(), emit=events.append, warn=lines.append,
                            interval_s=5.0, lockstep=lockstep)
    tasks = ["chief:0", "worker:0", "worker:1"]
    for pid, task in enumerate(tasks):
        watch.observe(0, f"h{pid}", Started(task=task, pid=pid, ts=0.0), 0.0)
    for second in range(1, seconds + 1):
        now = float(second)
        for pid, task in enumerate(tasks):
            if report:
                watch.observe(0, f"h{pid}", Progress(task=task, step=10 * second, ts=now), now)
            beat = Heartbeat(ts=now, tasks={task: usage(pid, 0.5 * second,
                                                       wait_per_s.get(task, 0.02) * second)})
            watch.observe(0, f"h{pid}", beat, now)
    return watch, events, lines


def test_a_starved_task_is_named_in_events_job_health_and_the_summary() -> None:
    watch, events, lines = run_watch({"worker:1": 0.8}, 40)
    (flag,) = [e for e in events if isinstance(e, TaskStraggling)]
    assert (flag.task, flag.cause, flag.straggling) == ("worker:1", "starved", True)
    assert flag.wait_share == pytest.approx(0.8 / 1.3, abs=0.01)
    assert flag.message is not None and flag.message.startswith("worker:1 on h2: starved of CPU")
    assert [line for line in lines if line.startswith("straggler: worker:1 on h2")]
    health = [e for e in events if isinstance(e, JobHealth)]
    assert health[-1].stragglers == ["worker:1"]
    assert health[-1].held_back_by is not None and "starved" in health[-1].held_back_by
    assert health[-1].tasks["worker:1"]["wait_share"] == pytest.approx(0.615, abs=0.01)
    (logged,) = watch.summary()["stragglers"]
    assert logged["task"] == "worker:1" and logged["cause"] == "starved"
    # ten seconds in at the latest: a window (10 s) and two looks (5 s apart) after the start
    assert flag.since <= 30


def test_a_balanced_job_names_no_one_and_a_ps_job_is_not_judged() -> None:
    _, events, lines = run_watch({}, 60)
    assert not [e for e in events if isinstance(e, TaskStraggling)] and not lines
    _, events, _ = run_watch({"worker:1": 0.8}, 60, lockstep=False)
    assert not [e for e in events if isinstance(e, TaskStraggling)]


def test_without_step_reports_tasks_are_judged_once_settled() -> None:
    _, events, _ = run_watch({"worker:1": 0.8}, 18, report=False)
    assert not [e for e in events if isinstance(e, TaskStraggling)]  # still starting up
    _, events, _ = run_watch({"worker:1": 0.8}, 40, report=False)
    assert [e.task for e in events if isinstance(e, TaskStraggling)] == ["worker:1"]
