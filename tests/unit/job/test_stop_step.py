"""The coordinator's side of the stop step (:mod:`launcher.job.stop_step`): who is told which step
when, for one notice, notices from several tasks, and answers that come late or never."""

from __future__ import annotations

from launcher.job.stop_step import StopStep, lock_step_hosts
from launcher.plan.planner import TaskPlan
from launcher.run.failures import FailureKind, classify_exit
from worker.wire.protocol import Exited, StopAt, TaskReport
from worker.wire.tfconfig import TaskId, TFConfig

HOSTS = {"chief:0": "a", "worker:0": "a", "worker:1": "b"}


def rig() -> tuple[StopStep, list[tuple[str, StopAt]], list[str]]:
    sent: list[tuple[str, StopAt]] = []
    said: list[str] = []
    return StopStep(HOSTS, lambda host, m: sent.append((host, m)), said.append), sent, said


def report(task: str, kind: str, step: object) -> TaskReport:
    return TaskReport(task=task, kind=kind, ts=0.0, data={"step": step})


def test_the_noticing_task_gets_the_step_only_after_every_other_task_answered() -> None:
    stops, sent, said = rig()
    assert stops.on_report(report("worker:1", "preemption_notice", 152))
    assert stops.step == 153
    assert sent == [("a", StopAt("chief:0", 153)), ("a", StopAt("worker:0", 153))]
    assert said == ["worker:1 got a preemption notice after step 152: every task saves after "
                    "step 153 and stops"]
    stops.on_report(report("chief:0", "stop_ack", 153))
    assert len(sent) == 2  # worker:0 has not answered: worker:1 still holds
    stops.on_report(report("worker:0", "stop_ack", 153))
    assert sent[2:] == [("b", StopAt("worker:1", 153))]


def test_notices_from_several_tasks_are_one_preemption() -> None:
    stops, sent, _ = rig()
    stops.on_report(report("chief:0", "preemption_notice", 40))
    stops.on_report(report("worker:0", "preemption_notice", 40))  # held too, before its answer
    stops.on_report(report("worker:0", "stop_ack", 41))
    assert stops.step == 41 and len(sent) == 2  # worker:1 has not answered
    stops.on_report(report("worker:1", "stop_ack", 41))
    assert sent[2:] == [("a", StopAt("chief:0", 41)), ("a", StopAt("worker:0", 41))]


def test_a_lone_lock_step_task_is_answered_at_once_and_other_reports_are_left() -> None:
    sent: list[tuple[str, StopAt]] = []
    stops = StopStep({"chief:0": "a"}, lambda host, m: sent.append((host, m)), lambda _: None)
    assert not stops.on_report(report("chief:0", "restore_failed", 3))
    assert stops.on_report(report("chief:0", "preemption_notice", 7))
    assert sent == [("a", StopAt("chief:0", 8))]
    assert stops.on_report(report("chief:0", "preemption_notice", "x"))  # bad: ignored
    assert stops.step == 8


CLUSTER = {"chief": ("h:1",), "worker": ("h:2", "h:3"), "ps": ("h:4",)}


def plan(task: str) -> TaskPlan:
    config = TFConfig(cluster=CLUSTER, task=TaskId.parse(task))
    return TaskPlan(task=TaskId.parse(task), host=f"h-{task}", port=None, tf_config=config,
                    argv=("x",), env={}, cwd="/")


def test_the_lock_step_tasks_are_the_training_tasks_or_a_ps_jobs_chief() -> None:
    mwms = [plan(t) for t in ("chief:0", "worker:0", "worker:1", "evaluator:0")]
    assert lock_step_hosts(mwms) == {"chief:0": "h-chief:0", "worker:0": "h-worker:0",
                                     "worker:1": "h-worker:1"}
    ps = [plan(t) for t in ("chief:0", "worker:0", "ps:0")]
    assert lock_step_hosts(ps) == {"chief:0": "h-chief:0"}


def test_a_sigterm_after_the_preemption_save_is_still_that_preemption() -> None:
    ended = Exited(task="worker:1", ts=0.0, signal="SIGTERM")
    assert classify_exit(ended, restore_failed=None, reported_steps=True) == \
        (FailureKind.SIGNALLED, None)  # no save reported: a task killed by SIGTERM
    kind, note = classify_exit(ended, restore_failed=None, reported_steps=True,
                               saved_preemption=251)
    assert kind is FailureKind.PREEMPTED
    assert note == "it had saved its preemption checkpoint at step 251 when another SIGTERM ended it"
    crashed = Exited(task="worker:1", ts=0.0, exit_code=1)
    assert classify_exit(crashed, restore_failed=None, reported_steps=True,
                         saved_preemption=251)[0] is FailureKind.EXITED
