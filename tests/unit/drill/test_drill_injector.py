"""The fault injector over a scripted attempt: each fault fires once, when due (steps, the after=
timer with or without steps, seeded random choices), and waits while its target is unreachable."""

from __future__ import annotations

import math
import signal
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from launcher.drill.faults import parse_faults
from launcher.drill.injector import FaultInjector, Planned, resolve
from launcher.job.tasks import TaskState
from launcher.run.events import Event, FaultInjected
from tests.support.fake_trainer import write_checkpoint

TASKS = {"chief:0": "localhost", "worker:0": "localhost", "worker:1": "node-b"}


@dataclass
class Task:
    state: TaskState = TaskState.RUNNING


@dataclass
class Control:
    """What the attempt offers a hook, scripted."""

    attempt: int = 0
    tasks: dict[str, Task] = field(default_factory=lambda: {t: Task() for t in TASKS})
    started_at: float = 100.0
    first_progress_at: float | None = None
    reachable: bool = True
    sent: list[tuple[str, signal.Signals]] = field(default_factory=list)
    events: list[Event] = field(default_factory=list)

    def signal_task(self, task: str, sig: signal.Signals) -> str | None:
        if not self.reachable:
            return None
        self.sent.append((task, sig))
        return TASKS[task]

    def emit(self, event: Event) -> None:
        self.events.append(event)

    def warn(self, text: str) -> None:
        pass


def injector(*texts: str, seed: int = 0, checkpoint_dir: str | None = None) -> FaultInjector:
    return FaultInjector(resolve(parse_faults(texts, "f", "test"), TASKS, seed, 50),
                         checkpoint_dir=checkpoint_dir)


def test_at_step_fires_once_at_the_first_report_at_or_after_the_step() -> None:
    hook, control = injector("kill:worker:1:at-step=10"), Control()
    for step in (8, 9, 11, 12):
        hook.on_progress(control, "chief:0", step)
    assert control.sent == [("worker:1", signal.SIGKILL)]
    event, = control.events
    assert isinstance(event, FaultInjected)
    assert (event.fault, event.step, event.host, event.signal) == (
        "kill:worker:1:at-step=10", 11, "node-b", "SIGKILL")
    control.attempt = 1  # a later attempt reaching the step again: fired already
    hook.on_progress(control, "chief:0", 30)
    assert len(control.sent) == 1


def test_a_fault_is_at_the_step_its_task_had_reached() -> None:
    # what drill.md and the console say: the hurt task's last report, not the slowest task's
    warned: list[str] = []
    hook, control = injector("kill:worker:1:at-step=60"), Control()
    control.warn = warned.append  # type: ignore[method-assign]
    hook.on_progress(control, "chief:0", 58)
    hook.on_progress(control, "worker:0", 57)
    hook.on_progress(control, "worker:1", 62)
    event, = control.events
    assert isinstance(event, FaultInjected) and event.step == 62
    assert warned == ["drill: kill:worker:1:at-step=60 injected into worker:1 at step 62"]


def test_after_counts_from_the_first_step() -> None:
    hook, control = injector("stop:chief:after=15"), Control(first_progress_at=104.0)
    assert hook.on_tick(control, 110.0) == 119.0  # the attempt wakes the hook then
    assert control.sent == []
    assert hook.on_tick(control, 119.0) == math.inf
    assert control.sent == [("chief:0", signal.SIGSTOP)]


def test_after_works_for_a_script_that_never_reports_a_step() -> None:
    hook, control = injector("term:worker:0:after=2"), Control(started_at=50.0)
    assert hook.on_tick(control, 51.0) == 52.0
    hook.on_tick(control, 52.5)
    assert control.sent == [("worker:0", signal.SIGTERM)]
    assert control.events[0].record()["step"] == 0


def test_an_unreachable_task_is_tried_again() -> None:
    hook, control = injector("kill:chief:after=0"), Control(reachable=False)
    assert hook.on_tick(control, 100.0) == pytest.approx(100.2)
    assert control.events == []
    control.reachable = True
    hook.on_tick(control, 100.2)
    assert control.sent == [("chief:0", signal.SIGKILL)]


def test_one_fault_per_attempt_the_next_waits_for_the_restart() -> None:
    hook, control = injector("kill:worker:1:at-step=5", "kill:chief:at-step=5"), Control()
    hook.on_progress(control, "worker:0", 5)
    assert control.sent == [("worker:1", signal.SIGKILL)]
    control.attempt = 1
    hook.on_progress(control, "worker:0", 6)
    assert control.sent[1] == ("chief:0", signal.SIGKILL)
    assert [e.record()["attempt"] for e in control.events] == [0, 1]
    assert hook.pending == []


@pytest.mark.parametrize(("text", "hurt"), [
    ("kill:host:localhost:at-step=1", ["chief:0", "worker:0"]),
    ("kill:all:at-step=1", ["chief:0", "worker:0", "worker:1"]),
    ("crash:worker:0:at-step=1", ["worker:0"]),
])
def test_targets_that_name_several_tasks(text: str, hurt: list[str]) -> None:
    hook, control = injector(text), Control()
    hook.on_progress(control, "chief:0", 1)
    assert [task for task, _ in control.sent] == hurt


def test_random_choices_are_the_seeds() -> None:
    faults = parse_faults(["kill:random:random", "term:random:random"], "f", "test")
    first = resolve(faults, TASKS, seed=3, horizon_steps=50)
    assert resolve(faults, TASKS, seed=3, horizon_steps=50) == first
    assert all(p.at_step is not None and 1 <= p.at_step <= 50 for p in first)
    assert all(p.tasks[0] in TASKS for p in first)
    draws = {tuple((p.tasks, p.at_step) for p in resolve(faults, TASKS, s, 50))
             for s in range(20)}
    assert len(draws) > 5  # the seed does choose


def test_corrupt_checkpoint_waits_for_a_checkpoint_kills_the_chief_and_truncates_at_its_exit(
        tmp_path: Path) -> None:
    hook = injector("corrupt-checkpoint:latest:at-step=3", checkpoint_dir=str(tmp_path))
    control = Control()
    hook.on_progress(control, "chief:0", 3)
    assert control.sent == []  # nothing to corrupt yet
    write_checkpoint(str(tmp_path), 10)
    write_checkpoint(str(tmp_path), 20)
    hook.on_progress(control, "chief:0", 21)
    assert control.sent == [("chief:0", signal.SIGKILL)]
    assert control.events == []  # injected when the chief is gone
    write_checkpoint(str(tmp_path), 30)  # saved between the kill and the chief's death
    hook.on_progress(control, "chief:0", 31)
    hook.on_exited(control, "worker:0")  # another task's exit: not the one killed
    assert control.events == []
    hook.on_exited(control, "chief:0")
    event, = control.events
    record = event.record()
    assert record["detail"] == str(tmp_path / "ckpt-30") and record["step"] == 21
    assert (tmp_path / "ckpt-30.data-00000-of-00001").stat().st_size == 0
    assert (tmp_path / "ckpt-20.data-00000-of-00001").stat().st_size > 0
    from launcher.chief.checkpoints import latest_checkpoint

    found = latest_checkpoint(str(tmp_path)).checkpoint
    assert found is not None and found.step == 20  # the restart resumes from the one before
    hook.on_exited(control, "chief:0")  # its next exit (a later attempt): nothing more
    assert len(control.events) == 1 and (tmp_path / "ckpt-20.data-00000-of-00001").stat().st_size


def test_planned_trigger_text() -> None:
    planned, = resolve(parse_faults(["kill:chief:random"], "f", "t"), TASKS, 1, 9)
    assert isinstance(planned, Planned) and planned.trigger == f"at-step={planned.at_step}"


def test_a_task_not_started_yet_is_waited_for_and_a_finished_one_is_left_alone() -> None:
    hook, control = injector("kill:all:at-step=2"), Control()
    control.tasks["worker:1"].state = TaskState.PENDING  # its process has not started
    hook.on_progress(control, "chief:0", 2)
    assert control.sent == []
    control.tasks["worker:1"].state = TaskState.RUNNING
    control.tasks["worker:0"].state = TaskState.SUCCEEDED  # done: nothing to hurt there
    hook.on_progress(control, "chief:0", 3)
    assert [task for task, _ in control.sent] == ["chief:0", "worker:1"]
