"""``tfcluster status RUN_DIR`` and ``tfcluster logs RUN_DIR [TASK]``: a run directory read by a
person, for a run that is still going or long finished, from its files alone (``events.jsonl``,
``summary.json``, ``attempt-<N>/<type>-<index>.log``).

Whether a run is still going is asked of its coordinator's lock (``.tfcluster-run.lock``, held
with ``flock`` for as long as the coordinator lives); a run without an end event whose lock
nobody holds lost its coordinator. Every problem (no run there, no such task or attempt) is one
:class:`~launcher.errors.UsageError` line.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from launcher.errors import UsageError
from launcher.run.directory import EVENTS_FILE, LOCK_FILE, SUMMARY_FILE
from launcher.run.event_log import read_events
from launcher.run.events import JOB_ENDS, EventType
from worker.wire.tfconfig import TaskId, TFConfigError, task_order

_ATTEMPT_DIR = re.compile(r"^attempt-(\d+)$")
#: ``logs -f`` looks for new lines this often.
FOLLOW_POLL_S = 0.2


def _events(run_dir: Path) -> list[dict[str, Any]]:
    """The events of a run, skipping a last line still being written."""
    return read_events(run_dir / EVENTS_FILE, torn_ok=True)


def check_run_dir(run_dir: Path, verb: str) -> None:
    if not run_dir.is_dir():
        raise UsageError(f"tfcluster {verb}: {run_dir} is not a directory; give the run directory "
                         "of a job (its --run-dir, by default runs/<job>-<timestamp>)")
    if not (run_dir / EVENTS_FILE).is_file():
        raise UsageError(f"tfcluster {verb}: {run_dir} holds no run (no {EVENTS_FILE}); give the "
                         "run directory of a job (its --run-dir, by default runs/<job>-<timestamp>)")


def coordinator_alive(run_dir: Path) -> bool | None:
    """Whether a live coordinator holds the run's lock (None: the run has no lock file)."""
    try:
        fd = os.open(run_dir / LOCK_FILE, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    except OSError:
        return None
    finally:
        os.close(fd)
    return False


# --- status ---------------------------------------------------------------------------------

@dataclass
class _Attempt:
    number: int
    started: float
    resume_step: int | None = None
    ended: str | None = None  # "restarting" / "succeeded" / "failed"
    root_cause: dict[str, Any] | None = None
    steps: dict[str, int] = field(default_factory=dict)
    states: dict[str, str] = field(default_factory=dict)
    health: dict[str, Any] | None = None
    failed: dict[str, dict[str, Any]] = field(default_factory=dict)  # not recovered from
    restarts: dict[str, tuple[int, str]] = field(default_factory=dict)  # alone: count, why


def _attempts(events: list[dict[str, Any]]) -> list[_Attempt]:
    attempts: list[_Attempt] = []
    for event in events:
        kind = event["event"]
        if kind == EventType.ATTEMPT_STARTED:
            attempts.append(_Attempt(int(event.get("attempt", len(attempts))), float(event["ts"]),
                                     event.get("resume_step")))
            continue
        if not attempts:
            continue
        current, task = attempts[-1], event.get("task")
        if kind == EventType.TASK_PROGRESS and task:
            current.steps[task] = int(event.get("step", 0))
        elif kind == EventType.TASK_STARTED and task:
            current.states[task] = "running"
        elif kind == EventType.TASK_EXITED and task:
            current.states[task] = "stopped" if event.get("stopped") else "done"
        elif kind == EventType.TASK_FAILED and task:
            current.states[task] = f"failed ({event.get('kind')})"
            current.failed[task] = event
            current.root_cause = min(current.failed.values(),
                                     key=lambda e: float(e.get("died_at", 0)))
        elif kind in ("task_restarted", "task_left_out") and task:  # recovered from, alone
            current.failed.pop(task, None)
            current.root_cause = min(current.failed.values(), default=None,
                                     key=lambda e: float(e.get("died_at", 0)))
            restarted = kind == "task_restarted"
            current.states[task] = "restarting" if restarted else "left out"
            count = current.restarts.get(task, (0, ""))[0] + int(restarted)
            current.restarts[task] = (count, str(event.get("cause", "")))
        elif kind == EventType.JOB_HEALTH:
            current.health = event
        elif kind == EventType.JOB_RESTARTING:
            current.ended = "restarting"
        elif kind in JOB_ENDS:
            current.ended = "succeeded" if kind == EventType.JOB_SUCCEEDED else "failed"
    return attempts


def _cause_line(cause: dict[str, Any]) -> str:
    how = (f"killed by {cause['signal']}" if cause.get("signal")
           else f"exited {cause['exit_code']}" if cause.get("exit_code") is not None
           else str(cause.get("kind")))
    note = f": {cause['message']}" if cause.get("message") else ""
    return f"{cause.get('task')} on {cause.get('host')} {how}{note}"


def _size(size: Any) -> str:
    return "-" if not isinstance(size, int) else f"{size / 2**20:.0f} MiB"


def _ordered(tasks: Iterator[str] | list[str]) -> list[str]:
    def key(name: str) -> tuple[int, int, str]:
        try:
            return (*task_order(TaskId.parse(name)), name)
        except TFConfigError:
            return 99, 0, name
    return sorted(tasks, key=key)


def status_lines(run_dir: Path, now: float | None = None) -> list[str]:
    """Where the run stands (or how it ended), in lines a person reads."""
    check_run_dir(run_dir, "status")
    now = time.time() if now is None else now
    events = _events(run_dir)
    summary: dict[str, Any] | None = None
    with contextlib.suppress(OSError, json.JSONDecodeError):
        summary = json.loads((run_dir / SUMMARY_FILE).read_text())
    started = next((e for e in events if e["event"] == EventType.JOB_STARTED), {})
    end = next((e for e in reversed(events) if e["event"] in JOB_ENDS), None)
    attempts = _attempts(events)
    job = started.get("job", run_dir.name)
    out = [f"job {job}: {_standing(run_dir, end, attempts, events, now)}", f"run dir: {run_dir}"]
    figures = {a.get("attempt"): a for a in (summary or {}).get("attempts", [])}
    placed = {e.get("attempt"): e for e in events if e["event"] == "attempt_placed"}
    for attempt in attempts:
        begun = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(attempt.started))
        resumed = ("from the beginning" if attempt.resume_step is None
                   else f"from step {attempt.resume_step}")
        top = max(attempt.steps.values(), default=None)
        if figures.get(attempt.number, {}).get("max_step") is not None:
            top = figures[attempt.number]["max_step"]
        line = (f"attempt {attempt.number}: {attempt.ended or 'running'}, started {begun} "
                f"{resumed}, reached step {'-' if top is None else top}")
        if attempt.root_cause is not None:
            line += f"; root cause: {_cause_line(attempt.root_cause)}"
        extra = figures.get(attempt.number, {})
        if extra.get("steps_lost") is not None or extra.get("recovery_s") is not None:
            line += (f"; steps lost {extra.get('steps_lost', '-')}, "
                     f"recovered in {extra.get('recovery_s', '-')}s")
        out.append(line)
        if attempt.number in placed:
            out.append(_placement_line(placed[attempt.number]))
    if attempts:
        out += _task_lines(attempts[-1], ((summary or {}).get("health") or {}).get("tasks", {}))
    out += _health_lines(run_dir, events, summary)
    return out


def _placement_line(placed: dict[str, Any]) -> str:
    """Where a pool job's attempt ran: its size, each task's host, spares, hosts left out."""
    where = ", ".join(f"{task}@{host}" for task, host in (placed.get("placement") or {}).items())
    line = f"  {placed.get('workers')} of {placed.get('max_workers')} workers: {where}"
    if placed.get("spares"):
        line += f"; spares {', '.join(placed['spares'])}"
    left = placed.get("left_out") or {}
    if left:
        line += "; left out " + ", ".join(f"{h} ({why})" for h, why in left.items())
    return line


def _standing(run_dir: Path, end: dict[str, Any] | None, attempts: list[_Attempt],
              events: list[dict[str, Any]], now: float) -> str:
    restarts = max(0, len(attempts) - 1)
    took = f" in {float(end['ts']) - float(events[0]['ts']):.1f}s" if end and events else ""
    if end is not None and end["event"] == EventType.JOB_SUCCEEDED:
        return f"succeeded after {len(attempts)} attempt(s){took}"
    if end is not None:
        return (f"failed after {len(attempts)} attempt(s){took}: {end.get('reason')}; "
                f"exit code {end.get('exit_code')}")
    alive = coordinator_alive(run_dir)
    quiet = now - float(events[-1]["ts"]) if events else 0.0
    attempt = attempts[-1].number if attempts else 0
    if alive is False:
        return (f"not running: its coordinator is gone (last event {quiet:.0f}s ago, attempt "
                f"{attempt}); continue it with tfcluster run --resume {run_dir}")
    return f"running, attempt {attempt} ({restarts} restart(s)), last event {quiet:.0f}s ago"


def _task_lines(attempt: _Attempt, ended: dict[str, Any]) -> list[str]:
    """Per task: live figures from the last ``job_health`` or, once the job ended, the summary's
    (last steps/s, mean CPU, peak RSS)."""
    figures = (attempt.health or {}).get("tasks", {})
    names = _ordered(list({*attempt.states, *attempt.steps, *figures}))
    out = [f"tasks (attempt {attempt.number}):"] if names else []
    for name in names:
        one = figures.get(name, {})
        final = ended.get(name, {})
        rate = final.get("steps_per_s", one.get("steps_per_s"))
        cpu = final.get("cpu_percent_mean", one.get("cpu_percent"))
        step = max([s for s in (attempt.steps.get(name), one.get("step"), final.get("step"))
                    if s is not None], default=None)
        if final:
            one = {"rss_bytes": final.get("peak_rss_bytes")}
        out.append(f"  {name:<12} {attempt.states.get(name, 'pending'):<18} "
                   f"step {'-' if step is None else step:<8} "
                   f"{'-' if rate is None else f'{rate:.2f}'} steps/s  "
                   f"cpu {'-' if cpu is None else f'{cpu:.0f}%'}{' (mean)' if final else ''}  "
                   f"{'peak rss' if final else 'rss'} {_size(one.get('rss_bytes'))}"
                   + _restarts(attempt.restarts.get(name)))
    return out


def _restarts(restarts: tuple[int, str] | None) -> str:
    """A task restarted alone (parameter_server): how often, and the last decision."""
    if restarts is None:
        return ""
    count, cause = restarts
    return f"  restarted {count}x (last: {cause})" if count else f"  (left out: {cause})"


def _health_lines(run_dir: Path, events: list[dict[str, Any]],
                  summary: dict[str, Any] | None) -> list[str]:
    out = []
    health = (summary or {}).get("health") or {}
    last = next((e for e in reversed(events) if e["event"] == EventType.JOB_HEALTH), None)
    slowest = health.get("slowest") or (last or {}).get("slowest")
    if slowest:
        out.append(f"slowest task: {slowest}")
    for event in events:
        if event["event"] == EventType.TASK_STRAGGLING and event.get("straggling") and \
                event.get("cause", "slow_steps") != "slow_steps":
            out.append(f"straggler: {event.get('message')} (attempt {event.get('attempt')})")
        elif event["event"] == EventType.TASK_STRAGGLING and event.get("straggling"):
            out.append(f"straggler: {event['task']} (attempt {event.get('attempt')}): "
                       f"{event.get('steps_per_s')} steps/s against "
                       f"{event.get('others_steps_per_s')} for the others")
        elif event["event"] == EventType.TASK_MEMORY_HIGH:
            out.append(f"memory: {event.get('message')}")
    metrics = (summary or {}).get("metrics")
    if metrics and metrics.get("reports"):
        dropped = sum((metrics.get("dropped") or {}).values())
        out.append(f"metrics: {metrics['reports']} reports in {metrics.get('file')} "
                   f"({dropped} dropped)")
    if (run_dir / "tensorboard").is_dir():
        out.append(f"tensorboard: tensorboard --logdir {run_dir / 'tensorboard'}")
    return out


# --- logs -----------------------------------------------------------------------------------

def attempt_numbers(run_dir: Path) -> list[int]:
    found = [int(m.group(1)) for p in run_dir.iterdir() if p.is_dir()
             and (m := _ATTEMPT_DIR.match(p.name))]
    return sorted(found)


def log_path(run_dir: Path, task: str | None, attempt: int | None) -> tuple[Path, str, int]:
    """The log of ``task`` (default: the first task, chief first) in ``attempt`` (default the
    latest); one clear line if there is no such attempt or task."""
    check_run_dir(run_dir, "logs")
    numbers = attempt_numbers(run_dir)
    if not numbers:
        raise UsageError(f"tfcluster logs: {run_dir} has no task logs yet (no attempt-<N>/)")
    if attempt is None:
        attempt = numbers[-1]
    elif attempt not in numbers:
        raise UsageError(f"tfcluster logs: no attempt {attempt} in {run_dir} "
                         f"(attempts: {', '.join(map(str, numbers))})")
    logs = {p.stem: p for p in (run_dir / f"attempt-{attempt}").glob("*.log")}
    names = {stem: _task_of(stem) for stem in logs}
    known = _ordered([n for n in names.values() if n])
    if task is None:
        if not known:
            raise UsageError(f"tfcluster logs: attempt {attempt} of {run_dir} has no task logs")
        task = known[0]
    try:
        stem = TaskId.parse(task).file_stem
    except TFConfigError as exc:
        raise UsageError(f"tfcluster logs: {task!r} is not a task ({exc}); give one like "
                         f"worker:1 (tasks: {', '.join(known)})") from None
    if stem not in logs:
        raise UsageError(f"tfcluster logs: no task {task} in attempt {attempt} of {run_dir} "
                         f"(tasks: {', '.join(known) or 'none'})")
    return logs[stem], task, attempt


def _task_of(stem: str) -> str | None:
    kind, _, index = stem.rpartition("-")
    if not index.isdigit():
        return None
    with contextlib.suppress(TFConfigError):
        return str(TaskId.parse(f"{kind}:{index}"))
    return None


class _EndWatch:
    """Whether ``events.jsonl`` has an end event yet, reading only what was added since the last
    look (a long job's events file can be large)."""

    def __init__(self, path: Path) -> None:
        self.path, self.offset, self.ended = path, 0, False

    def __call__(self) -> bool:
        with self.path.open("rb") as handle:
            handle.seek(self.offset)
            data = handle.read()
        complete = data[:data.rfind(b"\n") + 1]  # a line still being written waits
        self.offset += len(complete)
        self.ended = self.ended or any(
            f'"event":"{end.value}"'.encode() in complete.replace(b" ", b"") for end in JOB_ENDS)
        return self.ended


def _of_the_job(run_dir: Path, task: str | None) -> bool:
    """Whether the job has started and ``task`` (None: any) is one of its tasks."""
    started = next((e for e in _events(run_dir) if e["event"] == EventType.JOB_STARTED), None)
    return started is not None and (task is None or task in started.get("tasks", ()))


def print_log(path: Path, out: TextIO) -> int:
    """Copy the log to ``out``; the offset reached."""
    with path.open("rb") as handle:
        data = handle.read()
    out.write(data.decode("utf-8", "replace"))
    out.flush()
    return len(data)


def follow_log(run_dir: Path, task: str | None, attempt: int | None, out: TextIO, *,
               err: TextIO = sys.stderr, poll_s: float = FOLLOW_POLL_S,
               sleep: Callable[[float], None] = time.sleep) -> None:
    """Print the log and then what is added to it until the job ends. Without ``attempt`` it
    moves on to the next attempt's log of the same task when the job restarts. A task of the
    running job that has not written a line yet (so has no log) is waited for."""
    check_run_dir(run_dir, "logs")
    job_ended = _EndWatch(run_dir / EVENTS_FILE)
    while True:
        ended = job_ended()
        try:
            path, task, current = log_path(run_dir, task, attempt)
            break
        except UsageError:
            if ended or not _of_the_job(run_dir, task):
                raise
        sleep(poll_s)
    offset = 0
    while True:
        ended = job_ended()  # before reading: nothing written before the end is missed
        with path.open("rb") as handle:
            handle.seek(offset)
            data = handle.read()
        if data:
            offset += len(data)
            out.write(data.decode("utf-8", "replace"))
            out.flush()
        if ended:
            return
        if attempt is None and (newer := [n for n in attempt_numbers(run_dir) if n > current]):
            nxt = run_dir / f"attempt-{newer[0]}" / path.name
            if nxt.exists():
                err.write(f"[tfcluster] attempt {newer[0]} started: following {nxt}\n")
                err.flush()
                path, current, offset = nxt, newer[0], 0
                continue
        sleep(poll_s)
