"""``tfcluster run --resume RUN_DIR``: continue a job whose coordinator died (SIGKILL, a reboot) or
was stopped (Ctrl-C, SIGTERM), in the same run directory, under the same job name.

What a resume knows it reads from the run directory alone:

- the spec, from ``spec.json`` (stored at job start, with ``--checkpoint-dir`` applied, and the
  directory relative paths were resolved against), validated again like any spec;
- the attempts so far, rebuilt from ``events.jsonl`` (:func:`attempts_from_events`): their number,
  how each ended, whether it was counted against ``restart.max_restarts`` (as the coordinator
  recorded it), the checkpoint it started from.

The new coordinator then finds the latest complete chief checkpoint with the ordinary discovery
(:meth:`~launcher.job.coordinator.Coordinator._after_failure`), records ``job_resumed`` and runs the
next attempt, numbered after the last one in the events. The restart budget carries over: the
attempts the earlier coordinator(s) charged stay charged. **The coordinator's own loss is not
counted**: its tasks did not fail, they were stopped because tfcluster was gone, like a preemption;
the attempt it was running is recorded as ``interrupted`` (even when a task of it had failed: the
coordinator never decided what that failure meant). A job that already succeeded is not run
again (one line, exit 0); a job that failed on its own (restarts used up, a crash loop) is refused,
as resuming it would only repeat the failure.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from launcher.errors import UsageError
from launcher.job.failure_rules import judged_history
from launcher.job.policy import restarts_used
from launcher.job.resume_workdir import check_workdir
from launcher.plan.placement import absolute
from launcher.plan.planner import LaunchPlan, Planner, ResumePoint
from launcher.run.directory import NEW_RUN, RunDir, RunDirError
from launcher.run.event_lines import EventLineError, EventLines
from launcher.run.events import Event, EventType, JobResumed
from launcher.run.failures import FailureKind, TaskFailure
from launcher.run.from_json import RecordError
from launcher.run.outcome import AttemptResult, AttemptStatus
from launcher.run.record_fields import FieldError, Fields, integer
from launcher.run.stored_spec import STORED_SPEC_FORMAT
from launcher.spec.loading import located, spec_from_dict
from launcher.spec.model import ClusterSpec
from worker.wire.tfconfig import TaskId

#: How ``job_failed`` says tfcluster itself was stopped (Ctrl-C, SIGTERM): such a job can resume.
STOPPED_PREFIX = "tfcluster was stopped by "

#: The coordinator's checkpoint discovery after an attempt: (its plan, its result, the checkpoint
#: it started from) -> (the result with its checkpoint step, the checkpoint to resume from).
FindResume = Callable[[LaunchPlan, AttemptResult, ResumePoint | None],
                      tuple[AttemptResult, ResumePoint | None]]


@dataclass(frozen=True)
class StartingPoint:
    """Where the coordinator's job loop starts: at attempt 0 (:data:`FRESH`), or after the attempts
    an earlier coordinator of the same run directory ran (``history``)."""

    history: tuple[AttemptResult, ...] = ()
    #: Whether this is a resume (a new coordinator continuing a run directory).
    resumed: bool = False
    #: The next attempt's number.
    first_attempt: int = 0
    #: The checkpoint the last attempt of ``history`` started from.
    resume_from: ResumePoint | None = None
    #: When the job first started (epoch seconds; None: now).
    started_at: float | None = None
    #: How the previous coordinator ended, as a phrase ("was lost", "was stopped by SIGTERM").
    previous_end: str = ""

    @property
    def bad_checkpoints(self) -> frozenset[str]:
        return frozenset().union(*(a.bad_checkpoints for a in self.history))

    def resume(self, planner: Planner, ports: Mapping[TaskId, int], history: list[AttemptResult],
               find: FindResume, emit: Callable[[Event], None]) -> ResumePoint | None:
        """The checkpoint the job's first attempt starts from: none for a fresh job; for a resumed
        one, the latest after the last attempt (found as after any attempt, updating that attempt
        in ``history``), and ``job_resumed`` is recorded."""
        resume = self.resume_from
        if not self.resumed:
            return resume
        if history:
            last = history[-1]
            history[-1], resume = find(planner.plan(last.attempt, ports, resume), last, resume)
        restart = planner.spec.restart
        emit(JobResumed(
            job=planner.spec.name, attempt=self.first_attempt,
            previous_attempt=history[-1].attempt if history else None,
            previous_coordinator=self.previous_end, restarts_used=restarts_used(history),
            max_restarts=restart.max_restarts, counts_against_budget=False,
            resume_step=None if resume is None else resume.step,
            resume_checkpoint=None if resume is None else resume.checkpoint))
        return resume


FRESH = StartingPoint()


@dataclass(frozen=True)
class Resumption:
    """A run directory opened for ``--resume``: the stored spec and where the job starts again.
    ``done`` is set (one line for the user) when there is nothing left to run."""

    run_dir: Path
    spec: ClusterSpec
    base_dir: str
    start: StartingPoint
    done: str | None = None
    #: What the user is told before the resume goes on (torn lines of events.jsonl skipped).
    notes: tuple[str, ...] = ()

    def headline(self) -> str:
        """One line saying what the resume is about to do."""
        start, restart = self.start, self.spec.restart
        after = f" after attempt {start.history[-1].attempt}" if start.history else ""
        return (f"resuming job {self.spec.name} in {self.run_dir}: attempt "
                f"{start.first_attempt}{after} (its coordinator {start.previous_end}); "
                f"{restarts_used(start.history)} of {restart.max_restarts} restart(s) used, "
                "the coordinator's loss not counted")


# --- rebuilding the attempts from events.jsonl ----------------------------------------------


@dataclass
class _Attempt:
    """What the events say of one attempt, as they are read."""

    number: int
    started_at: float
    ended_at: float
    resume_step: int | None
    resume_checkpoint: str | None
    ports: dict[str, int]
    failures: list[TaskFailure]
    max_step: int | None = None
    first_progress_at: float | None = None
    checkpoint_step: int | None = None
    counted: bool | None = None  # from job_restarting; None: the attempt did not end in one
    final: str | None = None  # "succeeded", "failed: <reason>", "stopped: SIGTERM"

    def result(self, has_checkpoints: bool) -> AttemptResult:
        signal = None
        if self.final == "succeeded":
            status = AttemptStatus.SUCCEEDED
        elif self.final is not None and self.final.startswith("stopped: "):
            status, signal = AttemptStatus.INTERRUPTED, self.final.removeprefix("stopped: ")
        elif self.counted is not None or self.final is not None:
            status = AttemptStatus.FAILED
        else:  # no end recorded: the coordinator was lost while the attempt ran
            status = AttemptStatus.INTERRUPTED
        cause = min(self.failures, key=lambda f: f.died_at, default=None)
        notice = None
        if cause is not None and cause.kind is FailureKind.PREEMPTED and self.counted is False:
            notice = "a preemption (recorded before the resume)"
        before = -1 if self.resume_step is None else self.resume_step
        after = -1 if self.checkpoint_step is None else self.checkpoint_step
        progress = after > before if has_checkpoints and status is AttemptStatus.FAILED else None
        restore_failed = any(f.kind is FailureKind.RESTORE_FAILED for f in self.failures)
        bad = frozenset({self.resume_checkpoint} if restore_failed and self.resume_checkpoint
                        else ())  # the checkpoint a task could not restore is the one it was given
        return AttemptResult(
            attempt=self.number, status=status, started_at=self.started_at,
            ended_at=self.ended_at, failures=tuple(self.failures), ports=self.ports,
            resume_step=self.resume_step, max_step=self.max_step,
            first_progress_at=self.first_progress_at, interrupt_signal=signal,
            checkpoint_step=self.checkpoint_step, made_progress=progress,
            bad_checkpoints=bad, preemption_notice=notice)

    @property
    def resume_point(self) -> ResumePoint | None:
        if self.resume_checkpoint is None:
            return None
        return ResumePoint(self.resume_checkpoint, self.resume_step)


@dataclass(frozen=True)
class PastRun:
    """The attempts ``events.jsonl`` records, and how the run (so far) ended."""

    attempts: tuple[AttemptResult, ...]
    #: The number the next attempt gets.
    next_attempt: int
    #: ``succeeded``, ``failed``, ``stopped`` (tfcluster got a signal) or ``lost`` (no end).
    ended: str
    reason: str
    started_at: float | None
    stop_signal: str | None = None
    #: The checkpoint the last attempt started from.
    resume_from: ResumePoint | None = None


def attempts_from_events(events: Iterable[Mapping[str, Any]], has_checkpoints: bool) -> PastRun:
    """Rebuild the attempts of a run (of every coordinator that used its directory so far) from
    its records, each checked against its event type (:func:`checked`)."""
    attempts: dict[int, _Attempt] = {}
    announced = 0  # the attempt the last job_restarting said comes next
    ended, reason, stop_signal = "lost", "", None
    started_at: float | None = None
    current: _Attempt | None = None
    for event in events:
        kind, ts = event.get("event"), float(event.get("ts", 0.0))
        number = event.get("attempt")
        if kind == EventType.JOB_STARTED:
            started_at = ts if started_at is None else started_at
            ended, reason, stop_signal = "lost", "", None
        elif kind == EventType.ATTEMPT_STARTED and isinstance(number, int):
            current = attempts[number] = _Attempt(
                number, ts, ts, event.get("resume_step"), event.get("resume_checkpoint"),
                dict(event.get("ports") or {}), [])
        elif kind == EventType.JOB_RESTARTING and isinstance(number, int):
            announced = number
            if current is not None and current.number == number - 1:
                current.counted = bool(event.get("counts_against_budget"))
                current.ended_at = ts
        elif kind in (EventType.JOB_SUCCEEDED, EventType.JOB_FAILED):
            reason = str(event.get("reason", ""))
            ended = "succeeded" if kind == EventType.JOB_SUCCEEDED else "failed"
            if reason.startswith(STOPPED_PREFIX):
                ended, stop_signal = "stopped", reason.removeprefix(STOPPED_PREFIX)
            if current is not None and current.counted is None:
                current.final = "succeeded" if ended == "succeeded" else (
                    f"stopped: {stop_signal}" if ended == "stopped" else f"failed: {reason}")
                current.ended_at = ts
        attempt = attempts.get(number) if isinstance(number, int) else None
        if attempt is None:
            continue
        if kind != EventType.JOB_RESTARTING:
            attempt.ended_at = max(attempt.ended_at, ts)
        if kind == EventType.TASK_PROGRESS and isinstance(event.get("step"), int):
            attempt.max_step = max(attempt.max_step or 0, event["step"])
            if attempt.first_progress_at is None:
                attempt.first_progress_at = ts
        elif kind == EventType.TASK_FAILED:
            attempt.failures.append(TaskFailure.from_dict(event))
        elif kind == EventType.CHECKPOINT_FOUND:
            attempt.checkpoint_step = event.get("step")
    numbers = sorted(attempts)
    results = tuple(attempts[n].result(has_checkpoints) for n in numbers)
    next_attempt = max([announced, *(n + 1 for n in numbers)])
    resume_from = attempts[numbers[-1]].resume_point if numbers else None
    return PastRun(results, next_attempt, ended, reason, started_at, stop_signal, resume_from)


# --- opening a run directory for --resume ----------------------------------------------------


def _stored(run_dir: RunDir) -> tuple[ClusterSpec, str]:
    record = run_dir.read_stored_spec()
    source = str(run_dir.spec_file)
    if record.get("format") != STORED_SPEC_FORMAT or not isinstance(record.get("base_dir"), str):
        raise RunDirError(run_dir.path, f"{run_dir.spec_file.name} is not a spec stored by this "
                          f"tfcluster (unknown format); {NEW_RUN}")
    return located(spec_from_dict(record.get("spec"), source=source), record["base_dir"]), \
        record["base_dir"]


def _check_agrees(path: Path, spec: ClusterSpec, base_dir: str, *, given: ClusterSpec | None,
                  checkpoint_dir: str | None, run_dir_flag: str | None) -> None:
    """Refuse a SPEC, --checkpoint-dir or --run-dir that says otherwise than the stored run."""
    flag = "tfcluster run --resume"
    if run_dir_flag is not None and Path(run_dir_flag).absolute() != path:
        raise UsageError(f"{flag} {path}: --run-dir {run_dir_flag} names another directory; "
                         "a resumed run stays in its own run directory (drop --run-dir)")
    if given is not None:
        ours, theirs = spec.model_dump(mode="json"), given.model_dump(mode="json")
        differ = sorted(k for k in ours.keys() | theirs.keys() if ours.get(k) != theirs.get(k))
        if differ:
            raise UsageError(f"{flag} {path}: the SPEC given differs from the run's stored spec "
                             f"in {', '.join(differ)}; drop SPEC (the run resumes with "
                             f"{path / 'spec.json'}) or start a new run")
    elif checkpoint_dir is not None:
        stored = None if spec.checkpoint is None else absolute(spec.checkpoint.dir, base_dir)
        if stored != absolute(checkpoint_dir, os.getcwd()):
            raise UsageError(f"{flag} {path}: --checkpoint-dir {checkpoint_dir} is not the run's "
                             f"checkpoint directory ({stored or 'none'}); drop --checkpoint-dir")


def open_resume(path: Path, *, given: ClusterSpec | None = None, checkpoint_dir: str | None = None,
                run_dir_flag: str | None = None) -> Resumption:
    """The run in ``path``, ready to be continued. Raises :class:`RunDirError` for a directory
    that is not a resumable run (missing, no stored spec, its coordinator still alive, a job that
    failed on its own) and :class:`UsageError` for arguments that contradict the stored run."""
    path = path.absolute()
    run_dir = RunDir(path, resuming=True)
    run_dir.check()
    spec, base_dir = _stored(run_dir)
    _check_agrees(path, spec, base_dir, given=given, checkpoint_dir=checkpoint_dir,
                  run_dir_flag=run_dir_flag)
    lines = EventLines(run_dir.events)
    try:
        past = attempts_from_events(checked(lines), spec.checkpoint is not None)
    except OSError as exc:
        raise RunDirError.from_os_error(path, exc, f"while reading {lines.path.name}") from exc
    except EventLineError as exc:
        raise RunDirError(path, f"cannot be resumed: {exc} (correct or delete that line, then "
                          "resume again)") from exc
    last = past.attempts[-1].attempt if past.attempts else None
    previous_end = {"lost": "was lost (no end recorded: killed, or its machine went down)",
                    "stopped": f"was stopped by {past.stop_signal}"}.get(past.ended, past.ended)
    start = StartingPoint(history=judged_history(past.attempts, spec.restart.rules), resumed=True,
                          first_attempt=past.next_attempt,
                          resume_from=past.resume_from, started_at=past.started_at,
                          previous_end=previous_end)
    done = None
    if past.ended == "succeeded":
        done = (f"job {spec.name} already succeeded ({len(past.attempts)} attempt(s)); nothing "
                f"to resume in {path}")
    elif past.ended == "failed":
        raise RunDirError(path, f"job {spec.name} failed (attempt {last}: {past.reason}); only a "
                          f"job whose coordinator died or was stopped can be resumed; {NEW_RUN}")
    if done is None:
        check_workdir(path, spec, base_dir)
    note = lines.torn_note()
    return Resumption(path, spec, base_dir, start, done, notes=(note,) if note else ())


def checked(lines: EventLines) -> Iterator[dict[str, Any]]:
    """The records of ``lines``, each field :func:`attempts_from_events` reads checked: one of
    the wrong type (or missing where it must be there) raises :class:`EventLineError` naming the
    line and the field. Fields it does not read are not asked for (an older tfcluster wrote
    fewer)."""
    for number, record in lines:
        try:
            _check(Fields(record))
        except (FieldError, RecordError) as exc:
            raise EventLineError(lines.path, number, str(exc)) from None
        yield record


def _check(one: Fields) -> None:
    one.ts()
    required = one.kind in (EventType.ATTEMPT_STARTED, EventType.JOB_RESTARTING)
    one.whole("attempt", required=required)
    if one.kind == EventType.ATTEMPT_STARTED:
        one.whole("resume_step"), one.string("resume_checkpoint")
        for task, port in one.obj("ports").items():
            if integer(port) is None:
                raise FieldError(one.where(f"ports[{task!r}]"), "int", port)
    elif one.kind == EventType.JOB_RESTARTING:
        one.flag("counts_against_budget")
    elif one.kind in (EventType.JOB_SUCCEEDED, EventType.JOB_FAILED):
        one.string("reason")
    elif one.kind in (EventType.TASK_PROGRESS, EventType.CHECKPOINT_FOUND):
        one.whole("step")
    elif one.kind == EventType.TASK_FAILED:
        TaskFailure.from_dict(one.record)
