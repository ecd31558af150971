"""What a fault cost in a job that restarts its tasks one at a time (``strategy:
parameter_server``), from ``events.jsonl`` alone: the ``task_restarted`` events it caused inside
its attempt, and from them the figures :mod:`launcher.drill.figures` reports.

- the restarts of a fault: for each task it hurt, that task's first ``task_restarted`` after the
  fault in the fault's attempt, unless the whole job restarted first (``job_restarting``: then the
  attempt figures apply);
- restarted: the tasks those restarts started again (each failed task and those restarted with
  it, ``together``: a ps's chief);
- recovery: from the fault to the moment the last of them was back (its ``task_started`` after
  the restart); when the chief was restarted, to its first ``task_progress`` after that: it trains
  again;
- teardown: from the detection to the stop of the tasks restarted with it (a ps's chief,
  ``task_exited`` with ``stopped``); None when nothing had to be stopped;
- resume step and steps lost: when the chief was restarted, the step it resumed from (0: from the
  beginning, no checkpoint) and the step reached before the fault minus it; when the chief
  trained on, none lost.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from launcher.run.events import EventType
from launcher.run.task_events import TaskRestarted
from worker.wire.tfconfig import CHIEF, TaskId

Record = dict[str, Any]
#: The task that runs the training loop (and writes the checkpoints) of a parameter_server job.
CHIEF_TASK = str(TaskId(CHIEF, 0))


@dataclass(frozen=True)
class TaskRecovery:
    restarted: tuple[str, ...]
    chief_restarted: bool
    recovery_s: float | None
    teardown_s: float | None
    resume_step: int | None  # the chief's (0: from the beginning); None: it was not restarted
    steps_lost: int


def _after(events: Sequence[Record], kind: str, ts: float, attempt: int, task: str) -> Record | None:
    return next((e for e in events if e["event"] == kind and float(e["ts"]) >= ts
                 and int(e.get("attempt", -1)) == attempt and e.get("task") == task), None)


def _restarts(events: Sequence[Record], injected_at: float, attempt: int,
              hurt: Sequence[str]) -> list[Record]:
    """The ``task_restarted`` of each task in ``hurt`` that followed the fault, in order."""
    job_restart = next((float(e["ts"]) for e in events if e["event"] == EventType.JOB_RESTARTING
                        and float(e["ts"]) >= injected_at), None)
    found = []
    for task in hurt:
        restart = _after(events, TaskRestarted.TYPE, injected_at, attempt, task)
        if restart is not None and (job_restart is None or float(restart["ts"]) < job_restart):
            found.append(restart)
    return sorted(found, key=lambda e: float(e["ts"]))


def _with(restart: Record) -> list[str]:
    return [str(restart["task"]), *(str(t) for t in restart.get("together") or ())]


def task_recovery(events: Sequence[Record], *, injected_at: float, attempt: int,
                  hurt: Sequence[str], step: int,
                  detected_at: float | None) -> TaskRecovery | None:
    """The figures of a fault applied at ``injected_at`` to the tasks ``hurt`` (at ``step``) if the
    job restarted tasks for it one at a time; None if it did not."""
    restarts = _restarts(events, injected_at, attempt, hurt)
    if not restarts:
        return None
    restarted = tuple(dict.fromkeys(t for r in restarts for t in _with(r)))
    back: dict[str, float] = {}
    stopped: list[float] = []
    for restart in restarts:
        at = float(restart["ts"])
        for task in _with(restart):
            started = _after(events, EventType.TASK_STARTED, at, attempt, task)
            if started is not None:
                back.setdefault(task, float(started["ts"]))
        for task in _with(restart)[1:]:
            exited = _after(events, EventType.TASK_EXITED, at, attempt, task)
            if exited is not None and exited.get("stopped"):
                stopped.append(float(exited["ts"]))
    chief = next((r for r in restarts if CHIEF_TASK in _with(r)), None)
    teardown = None if detected_at is None or not stopped else max(stopped) - detected_at
    if chief is None:
        recovered = max(back.values()) if len(back) == len(restarted) else None
        return TaskRecovery(restarted, False, _since(recovered, injected_at), teardown, None, 0)
    resume_step = int(chief.get("resume_step") or 0)
    trains = None if CHIEF_TASK not in back else \
        _after(events, EventType.TASK_PROGRESS, back[CHIEF_TASK], attempt, CHIEF_TASK)
    return TaskRecovery(restarted, True,
                        _since(None if trains is None else float(trains["ts"]), injected_at),
                        teardown, resume_step, max(0, step - resume_step))


def _since(at: float | None, start: float) -> float | None:
    return None if at is None else at - start
