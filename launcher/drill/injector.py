"""The attempt hook that injects a drill's faults, each once, when it becomes due.

Faults are first *resolved* with the drill's seed (:func:`resolve`): a ``random`` target becomes
one task, a ``random`` trigger a step, ``host:NAME`` / ``all`` the tasks they name. The
:class:`FaultInjector` then watches the attempt (every progress report, and a timer for ``after=``)
and fires each due fault, writing one ``fault_injected`` event with the fault as written, what it
resolved to, and the step the hurt task had reached when it was injected (its last report).

``corrupt-checkpoint`` kills the chief, and truncates its latest checkpoint when the chief's exit is
reported (:meth:`FaultInjector.on_exited`): its ``fault_injected`` event, naming the checkpoint, is
written then, with ``sent_at`` the kill.

``lose-host`` takes its host away through a :class:`HostLoser` and arms the host's ``heal`` there:
the heal runs on a timer of its own (the coordinator may be between attempts then), and its
``fault_injected`` event is written at the attempt's next wake (with ``sent_at`` the moment the host
came back), or, when the job ended first, handed to the drill by :meth:`FaultInjector.unreported`.
"""

from __future__ import annotations

import math
import random
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from launcher.drill.corrupt import corrupt_latest, has_complete
from launcher.drill.faults import Action, Fault, TargetKind, TriggerKind
from launcher.drill.host_loss import Healed
from launcher.errors import TfclusterError
from launcher.job.hooks import TaskControl
from launcher.job.tasks import TaskState
from launcher.run.events import FaultInjected

#: ``random`` triggers draw a step in 1..this when the caller knows no better horizon.
DEFAULT_RANDOM_HORIZON = 100


@dataclass(frozen=True)
class Planned:
    """One fault as it will be injected: the tasks it hurts and when."""

    fault: Fault
    tasks: tuple[str, ...]
    host: str | None = None  # partition, lose-host, heal: the host
    at_step: int | None = None
    after_s: float | None = None

    @property
    def trigger(self) -> str:
        return f"at-step={self.at_step}" if self.at_step is not None else f"after={self.after_s:g}"


def resolve(faults: Sequence[Fault], task_hosts: Mapping[str, str], seed: int,
            horizon_steps: int = DEFAULT_RANDOM_HORIZON) -> list[Planned]:
    """Each fault with its random choices made (the same for the same seed and spec)."""
    rng = random.Random(seed)
    tasks = list(task_hosts)
    planned = []
    for fault in faults:
        target = fault.target
        host = None
        if target.kind is TargetKind.TASK:
            chosen: tuple[str, ...] = (target.name,)
        elif target.kind is TargetKind.RANDOM:
            chosen = (rng.choice(tasks),)
        elif target.kind is TargetKind.HOST:
            host = target.name
            chosen = tuple(t for t in tasks if task_hosts[t] == host)
        elif target.kind is TargetKind.ALL:
            chosen = tuple(tasks)
        elif target.kind is TargetKind.LATEST:
            chosen = tuple(t for t in tasks if t.startswith("chief:"))[:1] or tuple(tasks[:1])
        else:
            chosen = ()
        trigger = fault.trigger
        if trigger.kind is TriggerKind.AT_STEP:
            planned.append(Planned(fault, chosen, host, at_step=int(trigger.value)))
        elif trigger.kind is TriggerKind.AFTER:
            planned.append(Planned(fault, chosen, host, after_s=trigger.value))
        else:
            planned.append(Planned(fault, chosen, host,
                                   at_step=rng.randint(1, max(1, horizon_steps))))
    return planned


class Partitioner(Protocol):
    """Cuts a host off the network and heals it later (see :mod:`launcher.drill.partition`)."""

    def cut(self, host: str) -> str:
        """Cut ``host`` off; what was done, for the report. Raises TfclusterError if it cannot."""


class HostLoser(Protocol):
    """Takes hosts away for good and gives them back (see :mod:`launcher.drill.host_loss`)."""

    def lose(self, host: str) -> str:
        """Take ``host`` away; what was done. Raises TfclusterError if it cannot."""

    def heal_after(self, host: str, after_s: float) -> None:
        """Give ``host`` back ``after_s`` seconds from now, on a timer of its own."""

    def healed(self) -> list[Healed]:
        """The heals done since the last call."""


@dataclass
class _AttemptView:
    attempt: int = -1
    steps: dict[str, int] = field(default_factory=dict)  # each task's last reported step

    def reached(self, tasks: Sequence[str]) -> int:
        """The step the hurt ``tasks`` had reached (their last report) when the fault was
        injected: the furthest of them; of every task for a fault that hurts none."""
        hurt = [self.steps[task] for task in tasks if task in self.steps]
        return max(hurt or self.steps.values(), default=0)


@dataclass(frozen=True)
class _Corrupting:
    """A ``corrupt-checkpoint`` whose chief was killed: its checkpoint is truncated at its exit."""

    planned: Planned
    hosts: Sequence[str]
    sent_at: float
    step: int  # the step the chief had reached when it was killed


@dataclass
class FaultInjector:
    """Fires each planned fault once, in whichever attempt it becomes due."""

    planned: Sequence[Planned]
    checkpoint_dir: str | None = None
    partitioner: Partitioner | None = None
    host_loser: HostLoser | None = None
    fired: list[FaultInjected] = field(default_factory=list)
    _done: set[int] = field(default_factory=set)
    _view: _AttemptView = field(default_factory=_AttemptView)
    _corrupting: dict[str, _Corrupting] = field(default_factory=dict)  # by the chief killed

    @property
    def pending(self) -> list[Planned]:
        return [p for i, p in enumerate(self.planned) if i not in self._done]

    def _seen(self, control: TaskControl) -> _AttemptView:
        if self._view.attempt != control.attempt:
            self._view = _AttemptView(control.attempt)
        return self._view

    def on_progress(self, control: TaskControl, task: str, step: int) -> None:
        view = self._seen(control)
        self._report_heals(control)
        view.steps[task] = step  # its last: lower after a restart inside the attempt (a PS chief)
        for i, planned in enumerate(self.planned):
            if (i not in self._done and planned.at_step is not None and step >= planned.at_step
                    and self._fire(control, i)):
                return  # the attempt is stopping: the others wait for the next one

    def on_tick(self, control: TaskControl, now: float) -> float:
        self._seen(control)
        self._report_heals(control)  # the attempt wakes at least once a second
        since = control.first_progress_at or control.started_at
        wake = math.inf
        for i, planned in enumerate(self.planned):
            if i in self._done or planned.after_s is None or planned.fault.action is Action.HEAL:
                continue  # a heal's after= counts from its host's loss: see _lose_host
            due = since + planned.after_s
            if now < due:
                wake = min(wake, due)
            elif self._fire(control, i):
                return math.inf
            else:  # not reachable yet (agent starting, no checkpoint yet): try again soon
                wake = min(wake, now + 0.2)
        return wake

    def _fire(self, control: TaskControl, index: int) -> bool:
        planned = self.planned[index]
        action = planned.fault.action
        detail = ""
        sent_at = time.time()
        if action is Action.CORRUPT_CHECKPOINT and not has_complete(self.checkpoint_dir):
            return False  # no complete checkpoint yet: nothing to corrupt
        if action in (Action.PARTITION, Action.LOSE_HOST):
            if planned.host is None:
                return False
            try:
                detail = (self._lose_host(planned.host) if action is Action.LOSE_HOST
                          else self._cut(planned.host))
            except TfclusterError as exc:
                control.warn(f"drill: {planned.fault} could not be injected: {exc}")
                return False
            if not detail:
                return False  # nothing here can do it
            hosts = [planned.host]
        else:
            sig = action.signal
            states = [control.tasks[task].state for task in planned.tasks]
            if sig is None or TaskState.PENDING in states or TaskState.RUNNING not in states:
                return False  # a target has not started yet (or none runs): try again later
            hosts = [h for task, state in zip(planned.tasks, states, strict=True)
                     if state is TaskState.RUNNING and (h := control.signal_task(task, sig))]
            if not hosts:
                return False  # no agent reachable yet: try again later
        self._done.add(index)
        if action is Action.CORRUPT_CHECKPOINT:  # corrupted once dead: it can save no newer one
            self._corrupting[planned.tasks[0]] = _Corrupting(
                planned, hosts, sent_at, self._view.reached(planned.tasks))
            return True
        self._record(control, planned, hosts, detail, sent_at)
        return True

    def on_exited(self, control: TaskControl, task: str) -> None:
        """A chief killed by ``corrupt-checkpoint`` has exited: truncate its latest checkpoint
        now, when it can no longer write a newer one for the restart to resume from instead."""
        if (pending := self._corrupting.pop(task, None)) is None:
            return
        corrupted = corrupt_latest(self.checkpoint_dir)
        if corrupted is None:
            control.warn(f"drill: {pending.planned.fault}: the checkpoint could not be truncated")
        self._record(control, pending.planned, pending.hosts, corrupted or "", pending.sent_at,
                     step=pending.step)

    def _cut(self, host: str) -> str:
        return "" if self.partitioner is None else self.partitioner.cut(host)

    def _lose_host(self, host: str) -> str:
        """Take ``host`` away and arm its heal, if the drill has one."""
        if self.host_loser is None:
            return ""
        detail = self.host_loser.lose(host)
        for i, planned in enumerate(self.planned):
            if (i not in self._done and planned.fault.action is Action.HEAL
                    and planned.host == host and planned.after_s is not None):
                self.host_loser.heal_after(host, planned.after_s)
        return detail

    def _heal_index(self, host: str) -> int | None:
        return next((i for i, p in enumerate(self.planned) if i not in self._done
                     and p.fault.action is Action.HEAL and p.host == host), None)

    def _report_heals(self, control: TaskControl) -> None:
        """Write the event of each heal done since the attempt last woke."""
        for event in self._heal_events(control.attempt, control.warn):
            self.fired.append(event)
            control.emit(event)

    def _heal_events(self, attempt: int, warn: Callable[[str], None]) -> list[FaultInjected]:
        if self.host_loser is None:
            return []
        events = []
        for healed in self.host_loser.healed():
            index = self._heal_index(healed.host)
            if index is None:
                continue
            planned = self.planned[index]
            if not healed.ok:  # left lost (the drill gives it back at its end); never injected
                warn(f"drill: {planned.fault} could not be injected: {healed.detail}")
                continue
            self._done.add(index)
            events.append(self._event(attempt, planned, [healed.host], healed.detail, healed.at))
            warn(f"drill: {planned.fault}: {healed.host} is back ({healed.detail})")
        return events

    def unreported(self) -> list[FaultInjected]:
        """The heals done after the attempt last woke (the job ended first): their events, which
        no attempt wrote, for the drill to count."""
        events = self._heal_events(self._view.attempt, lambda _text: None)
        self.fired.extend(events)
        return events

    def _event(self, attempt: int, planned: Planned, hosts: Sequence[str], detail: str,
               sent_at: float, *, step: int | None = None) -> FaultInjected:
        action = planned.fault.action
        return FaultInjected(
            attempt=attempt, fault=str(planned.fault), action=action.value,
            trigger=planned.trigger, task=planned.tasks[0] if planned.tasks else "",
            tasks=planned.tasks, host=",".join(sorted(set(hosts))),
            signal=action.signal.name if action.signal else "",
            step=self._view.reached(planned.tasks) if step is None else step, detail=detail,
            sent_at=sent_at)

    def _record(self, control: TaskControl, planned: Planned, hosts: Sequence[str], detail: str,
                sent_at: float, *, step: int | None = None) -> None:
        self._seen(control)
        event = self._event(control.attempt, planned, hosts, detail, sent_at, step=step)
        self.fired.append(event)
        control.emit(event)
        what = f" ({detail})" if detail else ""
        hurt = (", ".join(hosts) if planned.fault.action is Action.LOSE_HOST
                else ", ".join(planned.tasks) or "-")
        control.warn(f"drill: {planned.fault} injected into {hurt} at step {event.step}{what}")
