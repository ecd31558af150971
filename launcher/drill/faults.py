"""Faults as data: ``ACTION:TARGET[:TRIGGER]`` parsed into a frozen, validated :class:`Fault`.

- actions: ``kill`` (SIGKILL), ``term`` (SIGTERM, a preemption notice), ``stop`` (SIGSTOP, a
  hang), ``crash`` (:data:`worker.wire.signals.CRASH_SIGNAL`, which the task bootstrap turns into an
  exception), ``partition`` (cut a host off the network, then heal it), ``corrupt-checkpoint``
  (truncate the data of the chief's latest complete checkpoint, then SIGKILL the chief so that the
  restart must skip it), ``kill-coordinator`` (SIGKILL tfcluster itself; no target),
  ``lose-host`` (take a host away for good: ``lose-host:NAME[:TRIGGER]``) and ``heal`` (give it
  back, ``heal:NAME:after=SECONDS`` counted from when ``lose-host:NAME`` took effect; see
  :mod:`launcher.drill.host_loss`);
- targets: ``chief``, ``worker:N``, ``ps:N``, ``evaluator:0`` (any ``TYPE:N``), ``random`` (one task,
  seeded),
  ``host:NAME`` (every task on that host, or the host itself for ``partition``), ``all``; ``latest``
  for ``corrupt-checkpoint``; a host's name alone for ``lose-host`` and ``heal`` (``host:NAME``
  too);
- triggers: ``at-step=N`` (when a task of the attempt reports step N or later), ``after=SECONDS``
  (from the attempt's first step, or from the tasks' start while none has reported a step, so it
  works for scripts that never report one), ``random`` (a step drawn with the drill's seed);
  without one, the fault fires at the attempt's first step (``after=0``).

Each fault fires once, in whichever attempt it becomes due. Problems are :class:`SpecProblem`\\ s
with a field path (``--fault[1].trigger``, ``scenarios[0].faults[2].target``).
"""

from __future__ import annotations

import enum
import math
import re
import signal
from collections.abc import Sequence
from dataclasses import dataclass

from launcher.spec.errors import SpecError, SpecProblem
from worker.wire.signals import CRASH_SIGNAL


class Action(enum.StrEnum):
    KILL = "kill"
    TERM = "term"
    STOP = "stop"
    CRASH = "crash"
    PARTITION = "partition"
    CORRUPT_CHECKPOINT = "corrupt-checkpoint"
    KILL_COORDINATOR = "kill-coordinator"
    LOSE_HOST = "lose-host"
    HEAL = "heal"

    @property
    def signal(self) -> signal.Signals | None:
        """The signal sent to the target's tasks, if the action is one."""
        return _SIGNALS.get(self)


_SIGNALS = {Action.KILL: signal.SIGKILL, Action.TERM: signal.SIGTERM, Action.STOP: signal.SIGSTOP,
            Action.CRASH: CRASH_SIGNAL, Action.CORRUPT_CHECKPOINT: signal.SIGKILL}


class TargetKind(enum.StrEnum):
    TASK = "task"          # one task, ``worker:1`` (``chief`` is ``chief:0``)
    RANDOM = "random"      # one task drawn with the seed
    HOST = "host"          # every task on a host (partition: the host)
    ALL = "all"            # every task
    LATEST = "latest"      # the chief's latest checkpoint (corrupt-checkpoint)
    COORDINATOR = "coordinator"  # tfcluster itself (kill-coordinator)


class TriggerKind(enum.StrEnum):
    AT_STEP = "at-step"
    AFTER = "after"
    RANDOM = "random"


@dataclass(frozen=True)
class Target:
    kind: TargetKind
    name: str = ""  # the task id (TASK) or host name (HOST)

    def __str__(self) -> str:
        return {TargetKind.TASK: self.name, TargetKind.HOST: f"host:{self.name}"}.get(
            self.kind, self.kind.value)


@dataclass(frozen=True)
class Trigger:
    kind: TriggerKind
    value: float = 0.0  # the step (AT_STEP) or seconds (AFTER)

    def __str__(self) -> str:
        if self.kind is TriggerKind.AT_STEP:
            return f"at-step={int(self.value)}"
        if self.kind is TriggerKind.AFTER:
            return f"after={self.value:g}"
        return "random"


@dataclass(frozen=True)
class Fault:
    action: Action
    target: Target
    trigger: Trigger

    def __str__(self) -> str:
        if self.action is Action.KILL_COORDINATOR:
            return f"{self.action}:{self.trigger}"
        if self.action in _HOST_ONLY:
            return f"{self.action}:{self.target.name}:{self.trigger}"
        return f"{self.action}:{self.target}:{self.trigger}"


#: Longest ``after=`` accepted, seconds (as for spec durations).
MAX_AFTER_S = 7 * 24 * 3600.0
_TASK = re.compile(r"^(chief|worker|ps|evaluator):([0-9]{1,6})$")
_HOST = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,252}$")
_ACTIONS = ", ".join(a.value for a in Action)
_TARGETS = "chief, worker:N, ps:N, evaluator:0, random, host:NAME, all"
_TRIGGERS = "at-step=N, after=SECONDS, random"
#: Actions whose target is a host by name alone (``lose-host:NAME``; ``host:NAME`` also accepted).
_HOST_ONLY = frozenset({Action.LOSE_HOST, Action.HEAL})


class FaultProblem(ValueError):
    """One problem of one fault: which part (``action``, ``target``, ``trigger``) and what."""

    def __init__(self, part: str, message: str) -> None:
        super().__init__(f"{part}: {message}")
        self.part = part
        self.message = message


def _looks_like_trigger(text: str) -> bool:
    return text == "random" or "=" in text


def parse_fault(text: object) -> Fault:
    """``ACTION:TARGET[:TRIGGER]`` as a :class:`Fault`; raises :class:`FaultProblem`."""
    if not isinstance(text, str) or not text.strip():
        raise FaultProblem("", f"a fault is a string ACTION:TARGET[:TRIGGER] "
                           f"(e.g. kill:worker:1:at-step=100), not {text!r}")
    parts = text.strip().split(":")
    try:
        action = Action(parts[0])
    except ValueError:
        raise FaultProblem("action", f"unknown action {parts[0]!r} (one of {_ACTIONS})") from None
    rest = parts[1:]
    trigger_text = ""
    if rest and _looks_like_trigger(rest[-1]) and (len(rest) >= 2 or "=" in rest[-1]):
        trigger_text = rest.pop()
    if action is Action.HEAL and not trigger_text.startswith(f"{TriggerKind.AFTER}="):
        raise FaultProblem("trigger", "heal needs after=SECONDS: how long after lose-host:NAME "
                           "took effect the host comes back (e.g. heal:NAME:after=30)")
    trigger = parse_trigger(trigger_text)
    target = _parse_target(action, ":".join(rest))
    return Fault(action, target, trigger)


def parse_trigger(text: str) -> Trigger:
    if not text:
        return Trigger(TriggerKind.AFTER, 0.0)
    if text == "random":
        return Trigger(TriggerKind.RANDOM)
    name, _, value = text.partition("=")
    if name == TriggerKind.AT_STEP:
        if not (value.isascii() and value.isdigit()) or not 1 <= int(value[:12]) <= 10**12:
            raise FaultProblem("trigger", f"at-step needs a whole step number >= 1, not {value!r}")
        return Trigger(TriggerKind.AT_STEP, float(int(value)))
    if name == TriggerKind.AFTER:
        try:
            seconds = float(value)
        except ValueError:
            seconds = math.nan
        if not 0 <= seconds <= MAX_AFTER_S:  # also rejects nan
            raise FaultProblem("trigger", f"after needs seconds between 0 and {MAX_AFTER_S:g}, "
                               f"not {value!r}")
        return Trigger(TriggerKind.AFTER, seconds)
    raise FaultProblem("trigger", f"unknown trigger {text!r} (one of {_TRIGGERS})")


def _parse_target(action: Action, text: str) -> Target:
    if action is Action.KILL_COORDINATOR:
        if text not in ("", "coordinator"):
            raise FaultProblem("target", f"kill-coordinator takes no target, not {text!r} "
                               "(write e.g. kill-coordinator:after=40)")
        return Target(TargetKind.COORDINATOR)
    if action is Action.CORRUPT_CHECKPOINT:
        if text != "latest":
            raise FaultProblem("target", f"corrupt-checkpoint corrupts the latest checkpoint: "
                               f"write corrupt-checkpoint:latest[:TRIGGER], not {text!r}")
        return Target(TargetKind.LATEST)
    if action in _HOST_ONLY:
        name = text.removeprefix("host:")
        if not _HOST.match(name):
            form = "[:TRIGGER]" if action is Action.LOSE_HOST else ":after=SECONDS"
            raise FaultProblem("target", f"{action} needs a host name: write {action}:NAME{form}, "
                               f"not {text!r}")
        return Target(TargetKind.HOST, name)
    if not text:
        raise FaultProblem("target", f"{action} needs a target ({_TARGETS})")
    kind, _, name = text.partition(":")
    if kind == "host":
        if not _HOST.match(name):
            raise FaultProblem("target", f"host:NAME needs a host name, not {text!r}")
        return Target(TargetKind.HOST, name)
    if action is Action.PARTITION:
        raise FaultProblem("target", f"partition cuts a host off: write partition:host:NAME, "
                           f"not {text!r}")
    if text in ("random", "all"):
        return Target(TargetKind(text))
    if text == "chief":
        return Target(TargetKind.TASK, "chief:0")
    if _TASK.match(text):
        return Target(TargetKind.TASK, f"{kind}:{int(name)}")
    raise FaultProblem("target", f"unknown target {text!r} ({_TARGETS})")


def parse_faults(texts: Sequence[object], path: str, source: str) -> list[Fault]:
    """Every fault of ``texts``, or one :class:`SpecError` listing each problem at
    ``PATH[i].PART``."""
    faults: list[Fault] = []
    problems: list[SpecProblem] = []
    for i, text in enumerate(texts):
        try:
            faults.append(parse_fault(text))
        except FaultProblem as problem:
            where = f"{path}[{i}]" + (f".{problem.part}" if problem.part else "")
            problems.append(SpecProblem(where, f"{problem.message} (in {text!r})"))
    if problems:
        raise SpecError(source, problems)
    return faults


def check_targets(faults: Sequence[Fault], tasks: Sequence[str], hosts: Sequence[str],
                  path: str, positions: Sequence[int] | None = None) -> list[SpecProblem]:
    """Problems of faults that name a task or host the spec does not have, or that cannot go
    together (:func:`host_loss_problems`) (``positions``: each fault's index as written, when some
    were left out). The host of a ``lose-host`` or ``heal`` is checked where it is looked up, when
    the drill starts (:func:`launcher.drill.host_loss.locate_losses`): a Slurm node is known then."""
    problems = []
    where = list(positions or range(len(faults)))
    for i, fault in zip(where, faults, strict=True):
        target = fault.target
        if target.kind is TargetKind.TASK and target.name not in tasks:
            problems.append(SpecProblem(f"{path}[{i}].target", f"no task {target.name!r} in the "
                                        f"spec (tasks: {', '.join(tasks)})"))
        if (target.kind is TargetKind.HOST and fault.action not in _HOST_ONLY
                and target.name not in hosts):
            problems.append(SpecProblem(f"{path}[{i}].target", f"no host {target.name!r} in the "
                                        f"spec (hosts: {', '.join(hosts)})"))
    return problems + host_loss_problems(faults, path, where)


def host_loss_problems(faults: Sequence[Fault], path: str,
                       positions: Sequence[int]) -> list[SpecProblem]:
    """Problems of one scenario's ``lose-host`` and ``heal`` faults taken together: a heal needs
    the lose-host of its host, each host is lost (and healed) once, and neither
    ``kill-coordinator`` (which would take the host's restoration with the coordinator) nor a
    ``partition`` of the same host (whose own heal would bring the host back) goes with them."""
    problems = []
    lost = {f.target.name for f in faults if f.action is Action.LOSE_HOST}
    cut = {f.target.name for f in faults if f.action is Action.PARTITION}
    coordinator_lost = any(f.action is Action.KILL_COORDINATOR for f in faults)
    seen: set[tuple[Action, str]] = set()
    for i, fault in zip(positions, faults, strict=True):
        if fault.action not in _HOST_ONLY:
            continue
        host = fault.target.name
        at = f"{path}[{i}]"
        if (fault.action, host) in seen:
            problems.append(SpecProblem(f"{at}.target", f"{fault.action}:{host} is given twice: "
                                        "a host is lost (and healed) once per scenario"))
        seen.add((fault.action, host))
        if fault.action is Action.HEAL and host not in lost:
            problems.append(SpecProblem(f"{at}.target", f"heal:{host} gives back a host that "
                                        f"lose-host:{host} took away, and no fault here is "
                                        f"lose-host:{host}"))
        if fault.action is Action.LOSE_HOST and coordinator_lost:
            problems.append(SpecProblem(f"{at}.action", "lose-host cannot go with "
                                        "kill-coordinator: the coordinator the drill kills would "
                                        "take the lost host's restoration with it"))
        if fault.action is Action.LOSE_HOST and host in cut:
            problems.append(SpecProblem(f"{at}.action", f"lose-host:{host} cannot go with "
                                        f"partition:host:{host}, whose own heal would bring the "
                                        "lost host back: give one or the other"))
    return problems
