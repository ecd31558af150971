"""The failures of one attempt, recorded as data the moment they are known: each task that died,
hung or lost its host, with its evidence (secrets masked), as a ``task_failed`` event too. The
earliest is the attempt's root cause (:func:`launcher.run.failures.root_cause`)."""

from __future__ import annotations

from collections.abc import Callable

from launcher.job.tasks import TaskState, TaskTable
from launcher.plan.secrets import Redactor
from launcher.run.events import Event, TaskFailed
from launcher.run.failures import FailureKind, TaskFailure, classify_exit, step_mismatch
from worker.wire.protocol import Exited


class FailureLog:
    def __init__(self, attempt: int, tasks: TaskTable, *, emit: Callable[[Event], None],
                 clock: Callable[[], float], redact: Redactor,
                 preemption_codes: frozenset[int]) -> None:
        self.attempt = attempt
        self.failures: list[TaskFailure] = []
        self._tasks = tasks
        self._emit = emit
        self._clock = clock
        self._redact = redact
        self._preemption_codes = preemption_codes

    def __bool__(self) -> bool:
        return bool(self.failures)

    def record(self, failure: TaskFailure) -> None:
        self.failures.append(failure)
        self._emit(TaskFailed(failure))

    def recovered(self) -> TaskFailure:
        """The latest failure was recovered from (its task was started again alone): it is no
        longer one of the attempt's."""
        return self.failures.pop()

    def exited(self, host: str, message: Exited, received_at: float,
               memory_note: str | None = None) -> FailureKind:
        """A running task exited unexpectedly (non-zero, or a signal tfcluster did not send);
        ``memory_note``: it ran out of memory, said how (launcher.job.memory)."""
        runtime = self._tasks[message.task]
        runtime.to(TaskState.FAILED)
        kind, note = classify_exit(message, restore_failed=runtime.restore_failed,
                                   reported_steps=runtime.step is not None,
                                   preemption_codes=self._preemption_codes,
                                   memory_note=memory_note,
                                   saved_preemption=runtime.saved_preemption)
        self.record(TaskFailure(
            task=message.task, host=host, attempt=self.attempt, kind=kind,
            died_at=message.ts, observed_at=received_at, exit_code=message.exit_code,
            signal=message.signal,
            traceback=None if message.traceback is None else self._redact(message.traceback),
            stderr_tail=tuple(self._redact(line) for line in message.stderr_tail),
            message=note))
        return kind

    def write_off(self, task: str, host: str, kind: FailureKind, since: float,
                  why: str) -> None:
        """A task failed without an exit of its own (hung, or its host lost)."""
        runtime = self._tasks[task]
        if runtime.state.active:
            runtime.to(TaskState.FAILED)
        self.record(TaskFailure(task=task, host=host, attempt=self.attempt, kind=kind,
                                died_at=since, observed_at=self._clock(), message=why))

    def start_steps_differ(self, firsts: dict[str, int], now: float) -> None:
        self.record(step_mismatch(firsts, self.attempt, now))
