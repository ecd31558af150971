"""What each injected fault cost, computed from ``events.jsonl`` alone.

Per fault: when it was detected (the first task failure observed after it: its ``observed_at``),
how long the teardown took (detection to the restart), recovery (fault to the first step of the
next attempt), and steps lost (:func:`launcher.run.step_figures.steps_lost`: the steps its attempt
reached beyond the checkpoint the next attempt resumed from, as ``summary.json`` and ``tfcluster
status`` count them); its step is the step the hurt task had reached when it was injected. In a
job that restarts its tasks one at a time (``parameter_server``) a fault usually restarts some
tasks inside its attempt instead: those figures are :mod:`launcher.drill.task_recovery`'s, with
the tasks restarted. A ``heal`` hurts nothing: it has
none of these. Per run: the job's restarts (whole attempts), the task restarts, and the outcome.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from typing import Any

from launcher.drill.faults import Action
from launcher.drill.task_recovery import task_recovery
from launcher.run.events import EventType
from launcher.run.step_figures import RunSteps, run_steps, steps_lost
from launcher.run.task_events import TaskRestarted

Record = dict[str, Any]


@dataclass(frozen=True)
class FaultFigures:
    fault: str
    action: str
    tasks: tuple[str, ...]
    attempt: int
    injected_at: float
    step: int  # the step the hurt task had reached when the fault was injected
    detail: str
    detected_as: str | None
    detection_s: float | None
    teardown_s: float | None
    recovery_s: float | None
    resume_step: int | None
    steps_lost: int | None
    host: str = ""  # the host(s) the fault was applied to, comma-separated
    #: The tasks started again for it inside its attempt (a parameter_server job), in order;
    #: () when the job restarted as a whole, or nothing.
    restarted: tuple[str, ...] = ()

    @property
    def hurt(self) -> str:
        """What the fault hurt, as a report names it: the host of a lost or healed host, else the
        tasks (else the host; "" for tfcluster itself)."""
        if self.action in (Action.LOSE_HOST, Action.HEAL) and self.host:
            return self.host
        return ", ".join(self.tasks) or self.host

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class RunFigures:
    faults: tuple[FaultFigures, ...]
    restarts: int  # of the whole job (``job_restarting``)
    outcome: str  # succeeded | failed | unfinished
    task_restarts: int = 0  # of single tasks inside an attempt (``task_restarted``)

    def to_dict(self) -> dict[str, Any]:
        return {"faults": [f.to_dict() for f in self.faults], "restarts": self.restarts,
                "task_restarts": self.task_restarts, "outcome": self.outcome}


def _first(events: Sequence[Record], kind: str, after: float, **match: Any) -> Record | None:
    return next((e for e in events if e["event"] == kind and e["ts"] >= after
                 and all(e.get(k) == v for k, v in match.items())), None)


def _observed(failure: Record) -> float:
    return float(failure.get("observed_at") or failure["ts"])


def fault_figures(events: Sequence[Record], injected: Record,
                  steps: RunSteps | None = None) -> FaultFigures:
    """The figures of one ``fault_injected`` record (or one a drill wrote for a fault it applied
    from outside the job, such as ``kill-coordinator``) among ``events`` (``steps``: theirs, if
    already folded)."""
    # when the fault was applied; older records and faults applied from outside have only ts
    ts = float(injected.get("sent_at") or injected["ts"])
    attempt = int(injected.get("attempt", 0))
    detected = next((e for e in events if e["event"] == EventType.TASK_FAILED
                     and _observed(e) >= ts), None)
    detected_at = None if detected is None else _observed(detected)
    resumed = next((e for e in events if e["event"] == EventType.TASK_PROGRESS and e.get("first")
                    and e["ts"] > ts and int(e["attempt"]) > attempt), None)
    started = next((e for e in events if e["event"] == EventType.ATTEMPT_STARTED
                    and e["ts"] > ts and int(e["attempt"]) > attempt), None)
    resume_step = None if started is None else int(started.get("resume_step") or 0)
    restarting = _first(events, EventType.JOB_RESTARTING, ts)
    teardown = None
    if detected_at is not None and restarting is not None:
        teardown = float(restarting["ts"]) - detected_at
    step = int(injected.get("step") or 0)
    struck = (run_steps(events) if steps is None else steps).attempt(attempt)
    reached = step if struck is None or struck.reached is None else struck.reached
    action = str(injected.get("action", ""))
    figures = FaultFigures(
        fault=str(injected.get("fault", f"{injected.get('signal')}:{injected.get('task')}")),
        action=action,
        tasks=tuple(t for t in injected.get("tasks") or [injected.get("task", "")] if t),
        attempt=attempt, injected_at=ts, step=step, detail=str(injected.get("detail", "")),
        detected_as=None if detected is None else f"{detected.get('kind')} ({detected['task']})",
        detection_s=None if detected_at is None else detected_at - ts,
        teardown_s=teardown,
        recovery_s=None if resumed is None else float(resumed["ts"]) - ts,
        resume_step=resume_step,
        steps_lost=None if resume_step is None else steps_lost(reached, resume_step),
        host=str(injected.get("host") or ""))
    if action == Action.HEAL:  # gives a host back: nothing to detect, nothing lost
        return replace(figures, detected_as=None, detection_s=None, teardown_s=None,
                       recovery_s=None, resume_step=None, steps_lost=None)
    alone = task_recovery(events, injected_at=ts, attempt=attempt, hurt=figures.tasks, step=step,
                          detected_at=detected_at)
    if alone is not None:  # tasks restarted inside the attempt, not the job
        return replace(figures, teardown_s=alone.teardown_s, recovery_s=alone.recovery_s,
                       resume_step=alone.resume_step, steps_lost=alone.steps_lost,
                       restarted=alone.restarted)
    return figures


def run_figures(events: Sequence[Record], extra: Sequence[Record] = ()) -> RunFigures:
    """Every fault's figures (``extra``: faults recorded outside ``events``), in order."""
    injected = sorted([e for e in events if e["event"] == EventType.FAULT_INJECTED] + list(extra),
                      key=lambda e: float(e["ts"]))
    restarts = sum(1 for e in events if e["event"] == EventType.JOB_RESTARTING)
    task_restarts = sum(1 for e in events if e["event"] == TaskRestarted.TYPE)
    final = next((e["event"] for e in reversed(events)
                  if e["event"] in (EventType.JOB_SUCCEEDED, EventType.JOB_FAILED)), "unfinished")
    steps = run_steps(events)
    return RunFigures(tuple(fault_figures(events, e, steps) for e in injected), restarts,
                      str(final).removeprefix("job_"), task_restarts)


def last_step_before(events: Sequence[Record], ts: float) -> int:
    """The highest step reported before ``ts`` (for faults applied from outside the job, which
    see only ``events.jsonl``: progress is written there at most once a second per task, so the
    freshest report is the best estimate of where the job was)."""
    return max((int(e["step"]) for e in events
                if e["event"] == EventType.TASK_PROGRESS and e["ts"] <= ts), default=0)
