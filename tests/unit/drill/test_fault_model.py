"""Faults as data: ``ACTION:TARGET[:TRIGGER]`` parsed, printed back, and refused with field paths."""

from __future__ import annotations

import signal

import pytest

from launcher.drill.faults import (
    Action,
    TargetKind,
    TriggerKind,
    check_targets,
    parse_fault,
    parse_faults,
)
from launcher.spec.errors import SpecError
from worker.wire.signals import CRASH_SIGNAL


@pytest.mark.parametrize(("text", "expected"), [
    ("kill:worker:1:at-step=150", (Action.KILL, TargetKind.TASK, "worker:1", TriggerKind.AT_STEP,
     150, "kill:worker:1:at-step=150")),
    ("stop:chief:after=20", (Action.STOP, TargetKind.TASK, "chief:0", TriggerKind.AFTER, 20,
     "stop:chief:0:after=20")),
    ("term:random", (Action.TERM, TargetKind.RANDOM, "", TriggerKind.AFTER, 0,
     "term:random:after=0")),
    ("term:random:random", (Action.TERM, TargetKind.RANDOM, "", TriggerKind.RANDOM, 0,
     "term:random:random")),
    ("kill:ps:0:after=2", (Action.KILL, TargetKind.TASK, "ps:0", TriggerKind.AFTER, 2,
     "kill:ps:0:after=2")),
    ("crash:evaluator:0:at-step=3", (Action.CRASH, TargetKind.TASK, "evaluator:0",
     TriggerKind.AT_STEP, 3, "crash:evaluator:0:at-step=3")),
    ("kill:all:after=1.5", (Action.KILL, TargetKind.ALL, "", TriggerKind.AFTER, 1.5,
     "kill:all:after=1.5")),
    ("kill:host:node-b", (Action.KILL, TargetKind.HOST, "node-b", TriggerKind.AFTER, 0,
     "kill:host:node-b:after=0")),
    ("partition:host:node-b:after=30", (Action.PARTITION, TargetKind.HOST, "node-b",
     TriggerKind.AFTER, 30, "partition:host:node-b:after=30")),
    ("corrupt-checkpoint:latest:at-step=200", (Action.CORRUPT_CHECKPOINT, TargetKind.LATEST, "",
     TriggerKind.AT_STEP, 200, "corrupt-checkpoint:latest:at-step=200")),
    ("kill-coordinator:after=40", (Action.KILL_COORDINATOR, TargetKind.COORDINATOR, "",
     TriggerKind.AFTER, 40, "kill-coordinator:after=40")),
])
def test_faults_parse_and_print_back(
        text: str, expected: tuple[Action, TargetKind, str, TriggerKind, float, str]) -> None:
    action, target, name, trigger, value, shown = expected
    fault = parse_fault(text)
    assert (fault.action, fault.target.kind, fault.target.name) == (action, target, name)
    assert (fault.trigger.kind, fault.trigger.value) == (trigger, value)
    assert str(fault) == shown
    assert parse_fault(str(fault)) == fault  # what a report shows can be given back


@pytest.mark.parametrize(("action", "sig"), [
    (Action.KILL, signal.SIGKILL), (Action.TERM, signal.SIGTERM), (Action.STOP, signal.SIGSTOP),
    (Action.CRASH, CRASH_SIGNAL), (Action.CORRUPT_CHECKPOINT, signal.SIGKILL),
    (Action.PARTITION, None), (Action.KILL_COORDINATOR, None), (Action.LOSE_HOST, None),
    (Action.HEAL, None),
])
def test_each_action_sends_its_signal(action: Action, sig: signal.Signals | None) -> None:
    assert action.signal is sig


@pytest.mark.parametrize(("text", "line"), [
    ("explode:worker:1", "--fault[0].action: unknown action 'explode' (one of kill, term, stop, "
     "crash, partition, corrupt-checkpoint, kill-coordinator, lose-host, heal) "
     "(in 'explode:worker:1')"),
    ("kill:wrker:1", "--fault[0].target: unknown target 'wrker:1' (chief, worker:N, ps:N, "
     "evaluator:0, random, host:NAME, all) (in 'kill:wrker:1')"),
    ("kill", "--fault[0].target: kill needs a target (chief, worker:N, ps:N, evaluator:0, random, "
     "host:NAME, all) (in 'kill')"),
    ("kill:worker:1:at-step=0", "--fault[0].trigger: at-step needs a whole step number >= 1, "
     "not '0' (in 'kill:worker:1:at-step=0')"),
    ("kill:worker:1:after=-3", "--fault[0].trigger: after needs seconds between 0 and 604800, "
     "not '-3' (in 'kill:worker:1:after=-3')"),
    ("kill:worker:1:after=nan", "--fault[0].trigger: after needs seconds between 0 and 604800, "
     "not 'nan' (in 'kill:worker:1:after=nan')"),
    ("kill:worker:1:when=3", "--fault[0].trigger: unknown trigger 'when=3' (one of at-step=N, "
     "after=SECONDS, random) (in 'kill:worker:1:when=3')"),
    ("partition:worker:1", "--fault[0].target: partition cuts a host off: write "
     "partition:host:NAME, not 'worker:1' (in 'partition:worker:1')"),
    ("corrupt-checkpoint:chief", "--fault[0].target: corrupt-checkpoint corrupts the latest "
     "checkpoint: write corrupt-checkpoint:latest[:TRIGGER], not 'chief' "
     "(in 'corrupt-checkpoint:chief')"),
    ("kill-coordinator:chief:after=3", "--fault[0].target: kill-coordinator takes no target, not "
     "'chief' (write e.g. kill-coordinator:after=40) (in 'kill-coordinator:chief:after=3')"),
])
def test_bad_faults_get_one_line_with_the_field_path(text: str, line: str) -> None:
    with pytest.raises(SpecError) as caught:
        parse_faults([text], "--fault", "tfcluster drill")
    assert str(caught.value) == f"tfcluster drill: {line}"


def test_every_bad_fault_is_reported_at_once() -> None:
    with pytest.raises(SpecError) as caught:
        parse_faults(["kill:chief", "bad", "term:worker:0:after=x", 7], "--fault", "src")
    assert [p.path for p in caught.value.problems] == [
        "--fault[1].action", "--fault[2].trigger", "--fault[3]"]


def test_targets_the_spec_does_not_have() -> None:
    faults = parse_faults(["kill:worker:5", "kill:host:elsewhere", "kill:worker:1"], "f", "s")
    problems = check_targets(faults, ["chief:0", "worker:0", "worker:1"], ["localhost"], "f")
    assert [str(p) for p in problems] == [
        "f[0].target: no task 'worker:5' in the spec (tasks: chief:0, worker:0, worker:1)",
        "f[1].target: no host 'elsewhere' in the spec (hosts: localhost)"]
