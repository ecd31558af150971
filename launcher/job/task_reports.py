"""What a task reports besides its steps (``worker.report`` kinds): a checkpoint it could not
restore (never handed out again), a preemption notice it got (the stop step's protocol is
:mod:`launcher.job.stop_step`'s), a model it exported, anything else said on the console."""

from __future__ import annotations

from collections.abc import Callable

from launcher.job.stop_step import StopStep
from launcher.job.tasks import TaskTable
from launcher.output.console import Console, printable
from launcher.run.events import Event, ModelExported, TaskPreempted
from worker.wire.protocol import TaskReport
from worker.wire.reports import ReportKind


def handle_report(message: TaskReport, attempt: int, *, tasks: TaskTable, bad: set[str],
                  emit: Callable[[Event], None], console: Console,
                  redact: Callable[[str], str], stops: StopStep | None = None) -> None:
    """Act on ``message`` from a task of ``attempt``; ``bad`` collects unrestorable checkpoints;
    ``stops`` takes the preemption notices and the answers to its stop step."""
    if stops is not None and stops.on_report(message):
        return
    if message.kind == ReportKind.RESTORE_FAILED:
        checkpoint = str(message.data.get("checkpoint", ""))
        tasks[message.task].restore_failed = checkpoint
        bad.add(checkpoint)
        console.warn(printable(redact(f"{message.task} could not restore {checkpoint}: "
                                      f"{message.data.get('error', '')}")))
    elif message.kind == ReportKind.PREEMPTED:
        step = message.data.get("step")
        if isinstance(step, int) and not isinstance(step, bool):
            tasks[message.task].saved_preemption = step
        emit(TaskPreempted(attempt, task=message.task, step=step))
    elif message.kind == ReportKind.EXPORTED:
        emit(ModelExported.from_report(attempt, message.task, message.data))
    elif message.kind not in (ReportKind.READY, ReportKind.PREEMPTION_NOTICE, ReportKind.STOP_ACK):
        console.say(printable(redact(f"{message.task} reported {message.kind}: {message.data}")))
