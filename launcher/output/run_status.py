"""``tfcluster status RUN_DIR``: where a run stands, or how it ended, in lines a person reads, from
its files alone (``events.jsonl``, ``summary.json``).

``events.jsonl`` is read once, line by line, keeping only what is shown (a long run's file is
large). What the files say is untrusted: a torn line is skipped; a line whose field has the wrong
type (a string step, a time of NaN) is skipped and said, naming the line and the field; a
``summary.json`` that is no JSON object (or not UTF-8) is said and its figures are left out.
``status`` advises ``run --resume`` only for a run a resume would take.
"""

from __future__ import annotations

import collections
import json
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

from launcher.output.browse import check_run_dir, coordinator_alive, ordered_tasks
from launcher.output.console import printable
from launcher.output.run_files import open_run_file
from launcher.output.status_figures import Attempt, health_lines, placement_line, task_lines
from launcher.run.directory import EVENTS_FILE, MAX_SPEC_BYTES, SPEC_FILE, SUMMARY_FILE
from launcher.run.event_lines import EventLineError, EventLines
from launcher.run.events import EventType
from launcher.run.record_fields import FieldError, Fields, integer, mapping, number
from launcher.run.step_figures import RunSteps
from launcher.run.stored_spec import STORED_SPEC_FORMAT
from worker.wire.safe_open import open_reading

#: Most bytes of ``summary.json`` read (tfcluster's own is far smaller).
MAX_SUMMARY_BYTES = 16 * 1024 * 1024
#: A status line is cut here (a root cause's message can be long).
MAX_STATUS_LINE_CHARS = 2000
#: The straggler and memory lines kept (the latest).
MAX_NOTES = 20
#: Lines skipped for a wrong type that are named (the count goes on).
_NAMED = 3


#: The fields of a ``task_failed`` that status shows, besides its exit code and time.
_CAUSE_TEXTS = ("task", "host", "kind", "signal", "message")


def _died_at(event: Mapping[str, Any]) -> float:
    return number(event.get("died_at")) or 0.0


@dataclass
class RunEvents:
    """What one pass over ``events.jsonl`` keeps for ``status``."""

    job: str | None = None
    first_ts: float | None = None
    last_ts: float | None = None
    end: dict[str, Any] | None = None
    attempts: list[Attempt] = field(default_factory=list)
    placed: dict[int, Mapping[str, Any]] = field(default_factory=dict)
    last_health: Mapping[str, Any] | None = None
    notes: collections.deque[str] = field(default_factory=lambda: collections.deque(
        maxlen=MAX_NOTES))
    skipped: list[str] = field(default_factory=list)
    skipped_count: int = 0
    #: Steps, steps/s, steps lost and each attempt's state, as every view counts them.
    steps: RunSteps = field(default_factory=RunSteps)

    def add(self, record: dict[str, Any]) -> None:
        """Take one record; FieldError if a field it needs has the wrong type (then nothing of
        it is kept)."""
        one = Fields(record)
        ts, kind = one.ts(), one.kind
        step = _STEPS.get(kind)
        if step is not None:
            step(self, one, ts)
        self.steps.add(record)
        self.first_ts = ts if self.first_ts is None else self.first_ts
        self.last_ts = ts

    def skip(self, error: EventLineError) -> None:
        self.skipped_count += 1
        if len(self.skipped) < _NAMED:
            self.skipped.append(f"line {error.number}: {error.detail}")


def _job_started(run: RunEvents, one: Fields, ts: float) -> None:
    if run.job is None:
        run.job = one.string("job")


def _attempt_started(run: RunEvents, one: Fields, ts: float) -> None:
    number_ = one.whole("attempt")
    run.attempts.append(Attempt(len(run.attempts) if number_ is None else number_, ts,
                                one.whole("resume_step")))


def _end(run: RunEvents, one: Fields, ts: float) -> None:
    run.end = {"event": one.kind, "ts": ts, "reason": one.string("reason"),
               "exit_code": one.whole("exit_code")}


def _task_event(run: RunEvents, one: Fields, ts: float) -> None:
    task = one.string("task")
    if not run.attempts or not task:
        return
    current, kind = run.attempts[-1], one.kind
    if kind == EventType.TASK_PROGRESS:
        current.steps[task] = one.whole("step") or 0
    elif kind == EventType.TASK_STARTED:
        current.states[task] = "running"
    elif kind == EventType.TASK_EXITED:
        current.states[task] = "stopped" if one.record.get("stopped") else "done"
    elif kind == EventType.TASK_FAILED:
        current.states[task] = f"failed ({one.string('kind')})"
        current.failed[task] = {name: one.string(name) for name in _CAUSE_TEXTS}
        current.failed[task].update(exit_code=one.whole("exit_code"),
                                    died_at=one.figure("died_at"))
        current.root_cause = min(current.failed.values(), key=_died_at)
    else:  # task_restarted / task_left_out: recovered from, alone
        cause = str(one.record.get("cause", ""))
        current.failed.pop(task, None)
        current.root_cause = min(current.failed.values(), default=None, key=_died_at)
        restarted = kind == "task_restarted"
        current.states[task] = "restarting" if restarted else "left out"
        count = current.restarts.get(task, (0, ""))[0] + int(restarted)
        current.restarts[task] = (count, cause)


def _health(run: RunEvents, one: Fields, ts: float) -> None:
    run.last_health = {"tasks": one.obj("tasks"), "slowest": one.string("slowest")}
    if run.attempts:
        run.attempts[-1].health = run.last_health


def _placed(run: RunEvents, one: Fields, ts: float) -> None:
    attempt = one.whole("attempt")
    if attempt is not None:
        run.placed[attempt] = one.record


def _straggling(run: RunEvents, one: Fields, ts: float) -> None:
    if not one.record.get("straggling"):
        return
    attempt, cause = one.record.get("attempt"), one.record.get("cause", "slow_steps")
    if cause != "slow_steps":
        run.notes.append(f"straggler: {one.record.get('message')} (attempt {attempt})")
        return
    mine, others = one.figure("steps_per_s"), one.figure("others_steps_per_s")
    run.notes.append(f"straggler: {one.record.get('task')} (attempt {attempt}): {mine} steps/s "
                     f"against {others} for the others")


def _memory(run: RunEvents, one: Fields, ts: float) -> None:
    run.notes.append(f"memory: {one.record.get('message')}")


_STEPS: dict[str, Callable[[RunEvents, Fields, float], None]] = {
    EventType.JOB_STARTED.value: _job_started,
    EventType.ATTEMPT_STARTED.value: _attempt_started,
    EventType.JOB_SUCCEEDED.value: _end, EventType.JOB_FAILED.value: _end,
    **{kind: _task_event for kind in (EventType.TASK_PROGRESS.value, EventType.TASK_STARTED.value,
                                      EventType.TASK_EXITED.value, EventType.TASK_FAILED.value,
                                      "task_restarted", "task_left_out")},
    EventType.JOB_HEALTH.value: _health,
    "attempt_placed": _placed,
    EventType.TASK_STRAGGLING.value: _straggling,
    EventType.TASK_MEMORY_HIGH.value: _memory,
}


def read_run(path: Path) -> RunEvents:
    """One pass over ``events.jsonl`` (OSError if it cannot be read)."""
    run = RunEvents()
    lines = EventLines(path, lenient=True)
    for number_, record in lines:
        try:
            run.add(record)
        except FieldError as exc:
            run.skip(EventLineError(path, number_, str(exc)))
    for error in lines.bad:
        run.skip(error)
    run.skipped_count += lines.bad_count - len(lines.bad)
    return run


def read_bounded(handle: BinaryIO, limit: int) -> bytes:
    """At most ``limit`` bytes of ``handle``, in chunks: memory for what the file holds, not
    for ``limit`` (``read(limit)`` takes that much at once)."""
    chunks: list[bytes] = []
    left = limit
    while left > 0 and (chunk := handle.read(min(left, 1024 * 1024))):
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def read_summary(path: Path) -> tuple[Mapping[str, Any], str | None]:
    """``summary.json`` as an object (empty if there is none yet), and what is wrong with it."""
    try:
        with open_run_file(path, "status") as handle:  # a FIFO, a symlink: one line
            data = read_bounded(handle, MAX_SUMMARY_BYTES + 1)
    except FileNotFoundError:
        return {}, None
    except OSError as exc:
        return {}, f"{path}: cannot be read ({exc.strerror or exc}); its figures are left out"
    try:
        if len(data) > MAX_SUMMARY_BYTES:
            raise ValueError(f"larger than {MAX_SUMMARY_BYTES // 2**20} MiB")
        summary = json.loads(data.decode("utf-8"), parse_constant=lambda _: None)
    except (ValueError, RecursionError) as exc:  # not UTF-8, not JSON, nested too deep
        return {}, f"{path}: not a summary ({str(exc)[:120]}); its figures are left out"
    if not isinstance(summary, dict):
        return {}, f"{path}: not a summary (a JSON {type(summary).__name__}); its figures are " \
            "left out"
    return summary, None


def status_lines(run_dir: Path, now: float | None = None) -> list[str]:
    """Where the run stands (or how it ended), in lines a person reads."""
    check_run_dir(run_dir, "status")
    now = time.time() if now is None else now
    run = read_run(run_dir / EVENTS_FILE)
    summary, summary_problem = read_summary(run_dir / SUMMARY_FILE)
    out = [f"job {run.job or run_dir.name}: {_standing(run_dir, run, now)}",
           f"run dir: {run_dir}"]
    listed = summary.get("attempts")
    figures = {integer(a.get("attempt")): a for a in (listed if isinstance(listed, list) else [])
               if isinstance(a, Mapping)}
    for attempt in run.attempts:
        begun = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(attempt.started))
        resumed = ("from the beginning" if attempt.resume_step is None
                   else f"from step {attempt.resume_step}")
        extra = figures.get(attempt.number, {})
        # summary.json's figures once written (the coordinator's, which the events agree with
        # unless events.jsonl reached its bound), else the same ones from the events
        steps = run.steps.attempt(attempt.number)
        top = integer(extra.get("reached_step"))
        if top is None and steps is not None:
            top = steps.reached
        if top is None:
            top = integer(extra.get("max_step"))
        state = "running" if steps is None else steps.state.value
        line = (f"attempt {attempt.number}: {state}, started {begun} "
                f"{resumed}, reached step {'-' if top is None else top}")
        if attempt.root_cause is not None:
            line += f"; root cause: {_cause_line(attempt.root_cause)}"
        lost, took = integer(extra.get("steps_lost")), number(extra.get("recovery_s"))
        if lost is None and not extra:
            lost = run.steps.lost(attempt.number)
        if lost is not None or took is not None:
            line += (f"; steps lost {'-' if lost is None else lost}, "
                     f"recovered in {'-' if took is None else took}s")
        out.append(line)
        if attempt.number in run.placed:
            out.append(placement_line(run.placed[attempt.number]))
    if run.attempts:
        out += task_lines(run.attempts[-1], mapping(mapping(summary.get("health")).get("tasks")),
                          ordered_tasks, run.steps.attempt(run.attempts[-1].number))
    out += health_lines(run_dir, run.last_health, list(run.notes), summary)
    # what the files say cannot drive the terminal: control characters shown escaped
    return [printable(line, MAX_STATUS_LINE_CHARS) for line in out + _problems(run, summary_problem)]


def _problems(run: RunEvents, summary_problem: str | None) -> list[str]:
    out = []
    if run.skipped_count:
        more = "" if run.skipped_count <= len(run.skipped) else \
            f" and {run.skipped_count - len(run.skipped)} more"
        out.append(f"{EVENTS_FILE}: skipped {run.skipped_count} line(s) that are not events of "
                   f"tfcluster ({'; '.join(run.skipped)}{more})")
    if summary_problem:
        out.append(summary_problem)
    return out


def _cause_line(cause: Mapping[str, Any]) -> str:
    how = (f"killed by {cause['signal']}" if cause.get("signal")
           else f"exited {cause['exit_code']}" if cause.get("exit_code") is not None
           else str(cause.get("kind")))
    note = f": {cause['message']}" if cause.get("message") else ""
    return f"{cause.get('task')} on {cause.get('host')} {how}{note}"


def _standing(run_dir: Path, run: RunEvents, now: float) -> str:
    attempts, end = run.attempts, run.end
    took = f" in {end['ts'] - run.first_ts:.1f}s" if end and run.first_ts is not None else ""
    if end is not None and end["event"] == EventType.JOB_SUCCEEDED:
        return f"succeeded after {len(attempts)} attempt(s){took}"
    if end is not None:
        return (f"failed after {len(attempts)} attempt(s){took}: {end.get('reason')}; "
                f"exit code {end.get('exit_code')}")
    alive = coordinator_alive(run_dir)
    quiet = now - run.last_ts if run.last_ts is not None else 0.0
    attempt = attempts[-1].number if attempts else 0
    if alive is False:
        return (f"not running: its coordinator is gone (last event {quiet:.0f}s ago, attempt "
                f"{attempt}); {_resume_advice(run_dir, run)}")
    restarts = max(0, len(attempts) - 1)
    return f"running, attempt {attempt} ({restarts} restart(s)), last event {quiet:.0f}s ago"


def _resume_advice(run_dir: Path, run: RunEvents) -> str:
    """How to continue a run whose coordinator is gone, when ``run --resume`` would take it."""
    try:
        with open_reading(run_dir / SPEC_FILE) as handle:
            stored = json.loads(read_bounded(handle, MAX_SPEC_BYTES).decode("utf-8"))
    except (OSError, ValueError, RecursionError):  # missing, planted, not JSON
        stored = None
    if not isinstance(stored, dict) or stored.get("format") != STORED_SPEC_FORMAT or \
            not isinstance(stored.get("base_dir"), str):
        return (f"it cannot be resumed ({SPEC_FILE} is missing or was not written by this "
                "tfcluster)")
    if run.skipped_count:
        return (f"to resume it, first correct or delete {EVENTS_FILE} {run.skipped[0]}, then "
                f"tfcluster run --resume {run_dir}")
    return f"continue it with tfcluster run --resume {run_dir}"

