"""Which tasks a fault must restart in a job that restarts its tasks one at a time (``strategy:
parameter_server``), and a problem, in one line, for each fault whose job did otherwise.

What tfcluster promises when one task dies (:mod:`launcher.job.task_policy`), as the drill checks
it from ``events.jsonl``:

=====================  ========================  ===============================================
task hurt              restarted (one attempt)   the chief
=====================  ========================  ===============================================
worker, evaluator      that task alone           trains on: no second ``task_started`` (same pid)
ps                     the ps and the chief      resumes from a checkpoint
chief                  the chief alone           resumes from a checkpoint
=====================  ========================  ===============================================

"Resumes from a checkpoint" holds when the job writes checkpoints (``checkpoint.dir``): the
chief's restart names the step it resumes from. A fault before the chief's first checkpoint
proves nothing about resuming, and fails that check too.

Checked for the faults that end one task (``kill``, ``crash``, ``term``). A hang (``stop``), a
partition or a lost host stop the whole attempt by design, a fault on several tasks at once has
no single expectation, and ``corrupt-checkpoint`` may leave no checkpoint to resume from: those
are judged by their outcome and result only.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from launcher.drill.faults import Action
from launcher.drill.figures import FaultFigures
from launcher.drill.task_recovery import CHIEF_TASK
from launcher.run.events import EventType
from launcher.run.task_events import TaskLeftOut
from worker.wire.tfconfig import PS, TaskId, TFConfigError

Record = dict[str, Any]
#: The actions that end the task they hit (and nothing else).
_ENDING = frozenset({Action.KILL, Action.CRASH, Action.TERM})


def expected_restart(task: TaskId) -> tuple[str, ...]:
    """The tasks restarted when ``task`` dies: a ps with the chief, any other task alone."""
    return (str(task), CHIEF_TASK) if task.type == PS else (str(task),)


def _said(tasks: Sequence[str]) -> str:
    return f"{tasks[0]} alone" if len(tasks) == 1 else " and ".join(tasks)


def _chief_starts(events: Sequence[Record], attempt: int, since: float,
                  until: float) -> list[Record]:
    return [e for e in events if e["event"] == EventType.TASK_STARTED
            and e.get("task") == CHIEF_TASK and int(e.get("attempt", -1)) == attempt
            and since <= float(e["ts"]) < until]


def _not_restarted(fault: FaultFigures, task: str, expected: Sequence[str],
                   events: Sequence[Record], until: float) -> str:
    """Why nothing was restarted for ``fault``, as its problem."""
    def seen(kind: str, **match: Any) -> bool:
        return any(e["event"] == kind and fault.injected_at <= float(e["ts"]) < until
                   and all(e.get(k) == v for k, v in match.items()) for e in events)
    if seen(TaskLeftOut.TYPE, task=task):
        return f"{task} was left out instead of restarted (expected {_said(expected)})"
    if seen(EventType.JOB_RESTARTING):
        return f"the whole job was restarted instead of {_said(expected)} inside the attempt"
    return f"no task was restarted for it (expected {_said(expected)})"


def restart_problems(faults: Sequence[FaultFigures], events: Sequence[Record], *,
                     checkpointing: bool) -> list[str]:
    """One line per fault whose job did not restart what :func:`expected_restart` says (see the
    module's table); ``checkpointing``: the job writes checkpoints."""
    problems = []
    ordered = sorted(faults, key=lambda f: f.injected_at)
    for n, fault in enumerate(ordered):
        if fault.action not in _ENDING or len(fault.tasks) != 1:
            continue
        try:
            task = TaskId.parse(fault.tasks[0])
        except TFConfigError:
            continue
        until = ordered[n + 1].injected_at if n + 1 < len(ordered) else math.inf
        expected = expected_restart(task)
        said = f"{fault.fault}: "
        if not fault.restarted:
            problems.append(said + _not_restarted(fault, str(task), expected, events, until))
            continue
        if set(fault.restarted) != set(expected):
            problems.append(f"{said}restarted {' and '.join(fault.restarted)}; expected "
                            f"{_said(expected)}")
        before = _chief_starts(events, fault.attempt, -math.inf, fault.injected_at)[-1:]
        again = _chief_starts(events, fault.attempt, fault.injected_at, until)
        if CHIEF_TASK not in expected and CHIEF_TASK not in fault.restarted and again:
            pids = " → ".join(str(e.get("pid")) for e in before + again)
            problems.append(f"{said}the chief was started again (pid {pids}): a {task.type}'s "
                            "failure must leave it training")
        if (CHIEF_TASK in expected and CHIEF_TASK in fault.restarted and checkpointing
                and not fault.resume_step):
            problems.append(f"{said}the chief started again from the beginning although the job "
                            "writes checkpoints (none was found: a fault before the chief's "
                            "first checkpoint proves nothing about resuming)")
    return problems

