"""What the events of a run (and the tasks' timing files) say about how its tasks started, and how
a drilled job recovered: the phases of a recovery, from the death of a task to the first step of the
next attempt (detect -> stop -> plan -> spawn -> import -> first step), and of a cold start.

The timing files are written by ``tasks/timed_entry.py``; without them there is no import phase.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from common import BenchmarkError, Event, of, one, ts

from launcher.drill.figures import fault_figures
from launcher.run.events import EventType

#: /proc start times have clock-tick (10 ms) resolution.
PROCESS_START_RESOLUTION_S = 0.02


@dataclass(frozen=True)
class Imports:
    """When the tasks of one attempt had imported the workload's heavy module
    (``tasks/timed_entry.py``)."""

    done_at: float  # the last task's time.time() once imported


def read_imports(timing_dir: Path, attempt: int, tasks: int) -> Imports | None:
    """None unless every one of the attempt's ``tasks`` wrote its timing file."""
    records = []
    for path in sorted(timing_dir.glob(f"{attempt}-*.json")):
        with contextlib.suppress(OSError, ValueError):
            records.append(json.loads(path.read_text(encoding="utf-8")))
    if len(records) < tasks:
        return None
    return Imports(max(float(r["imported"]) for r in records))


@dataclass(frozen=True)
class Start:
    """How the tasks of one attempt started: ``attempt_started`` -> every ``task_started`` (spawn)
    -> every task had imported the heavy module (import; None without timing files) -> the first
    step (``task_progress`` with ``first``)."""

    attempt_at: float
    started_at: float  # the last task_started
    import_s: float | None
    first_step_at: float
    all_stepping_at: float
    #: How many of the tasks started from a warm spare: from ``task_started.warm`` where the
    #: events have it, else the processes that existed before their attempt started.
    warm_tasks: int | None
    tasks: int
    #: Why the tasks that started cold did (``task_started.cold_reason``, with warm spares on).
    cold_reasons: tuple[str, ...] = ()

    @property
    def warm(self) -> bool | None:
        """Every task started from a warm spare (None: cannot tell)."""
        return None if self.warm_tasks is None else self.warm_tasks == self.tasks

    @property
    def spawn_s(self) -> float:
        return self.started_at - self.attempt_at

    @property
    def init_s(self) -> float:
        """Last task started -> first step (imports, MWMS, restore, the step itself)."""
        return self.first_step_at - self.started_at

    @property
    def first_step_s(self) -> float:
        """What ``init_s`` leaves after the import phase."""
        return self.init_s - (self.import_s or 0.0)


def attempt_start(events: Sequence[Event], attempt: int, timing_dir: Path | None) -> Start:
    started = one(events, EventType.ATTEMPT_STARTED, f"attempt {attempt}", attempt=attempt)
    tasks = of(events, EventType.TASK_STARTED, attempt=attempt)
    firsts = [e for e in of(events, EventType.TASK_PROGRESS, attempt=attempt) if e.get("first")]
    if not tasks or not firsts:
        raise BenchmarkError(f"attempt {attempt}: no task_started or no first task_progress")
    last_started = max(ts(e) for e in tasks)
    first_step = min(ts(e) for e in firsts)
    imports = read_imports(timing_dir, attempt, len(tasks)) if timing_dir is not None else None
    import_s = None
    if imports is not None:  # a warm spare may have imported before its task_started arrived
        import_s = min(max(0.0, imports.done_at - last_started), first_step - last_started)
    return Start(ts(started), last_started, import_s, first_step, max(ts(e) for e in firsts),
                 warm_tasks(tasks, ts(started), timing_dir, attempt), len(tasks),
                 tuple(str(e["cold_reason"]) for e in tasks if e.get("cold_reason")))


def warm_tasks(tasks: Sequence[Event], attempt_at: float, timing_dir: Path | None,
               attempt: int) -> int | None:
    if all("warm" in e for e in tasks):
        return sum(bool(e["warm"]) for e in tasks)
    if timing_dir is None:
        return None
    starts = []
    for path in sorted(timing_dir.glob(f"{attempt}-*.json")):
        with contextlib.suppress(OSError, ValueError):
            starts.append(json.loads(path.read_text(encoding="utf-8")).get("process_started"))
    if len(starts) < len(tasks) or None in starts:
        return None
    # /proc start times have clock-tick (10 ms) resolution: a cold task starts well after
    return sum(float(s) < attempt_at - PROCESS_START_RESOLUTION_S for s in starts)


@dataclass(frozen=True)
class ColdSample:
    coordinator_s: float  # Popen -> job_started
    to_attempt_s: float  # job_started -> attempt_started
    start: Start  # attempt 0
    popen_at: float

    @property
    def total_s(self) -> float:  # Popen -> first step (first task_progress with first=True)
        return self.start.first_step_at - self.popen_at

    @property
    def all_stepping_s(self) -> float:  # Popen -> every task reported its first step
        return self.start.all_stepping_at - self.popen_at


def cold_sample(events: Sequence[Event], popen_at: float, timing_dir: Path | None,
                attempt: int = 0) -> ColdSample:
    job = one(events, EventType.JOB_STARTED, "cold start")
    start = attempt_start(events, attempt, timing_dir)
    return ColdSample(ts(job) - popen_at, start.attempt_at - ts(job), start, popen_at)


@dataclass(frozen=True)
class DrillSample:
    """One drill, from its events. Death is ``task_failed.died_at`` (the agent's clock when it
    reaped the killed task); the phases after it add up to the recovery time:
    detect -> stop -> plan -> spawn -> import -> first step."""

    detection_ms: float  # task_failed.detection_latency_ms
    end_to_end_ms: float  # fault_injected.ts -> task_failed.observed_at
    died_at: float
    injected_at: float  # fault_injected.ts
    observed_at: float  # task_failed.observed_at
    stopped_at: float  # the last task_exited of attempt 0
    lookup_at: float  # checkpoint_found (agents' teardown confirmed, checkpoint looked up)
    restarting_at: float  # job_restarting
    restart: Start  # attempt 1
    steps_lost: int
    resume_step: int
    cold: ColdSample  # the drill's own attempt 0
    stop_exits: tuple[str, ...]  # how the other tasks of attempt 0 ended

    @property
    def detect_s(self) -> float:
        return self.observed_at - self.died_at

    @property
    def stop_s(self) -> float:
        return self.stopped_at - self.observed_at

    @property
    def plan_s(self) -> float:
        """Last task of attempt 0 stopped -> attempt 1 started: teardown confirmed, checkpoint
        lookup, policy, backoff, the new plan."""
        return self.restart.attempt_at - self.stopped_at

    @property
    def stopped_s(self) -> float:  # death -> every other task of attempt 0 stopped
        return self.stopped_at - self.died_at

    @property
    def backoff_s(self) -> float:  # job_restarting -> attempt_started
        return self.restart.attempt_at - self.restarting_at

    @property
    def restart_s(self) -> float:
        """Death -> every task of attempt 1 started (``task_started``)."""
        return self.restart.started_at - self.died_at

    @property
    def restart_from_fault_s(self) -> float:
        """``fault_injected.ts`` -> every task of attempt 1 started."""
        return self.restart.started_at - self.injected_at

    @property
    def recovery_s(self) -> float:  # death -> first step of attempt 1
        return self.restart.first_step_at - self.died_at

    @property
    def recovery_all_s(self) -> float:  # death -> every task of attempt 1 stepping
        return self.restart.all_stepping_at - self.died_at


def drill_sample(events: Sequence[Event], popen_at: float, task: str,
                 timing_dir: Path | None) -> DrillSample:
    injected = one(events, EventType.FAULT_INJECTED, "the fault was never injected")
    failed = [e for e in of(events, EventType.TASK_FAILED, attempt=0) if ts(e) >= ts(injected)]
    if [e.get("task") for e in failed] != [task]:
        raise BenchmarkError(f"expected one task_failed for {task}, got "
                             f"{[(e.get('task'), e.get('kind')) for e in failed]}")
    death = failed[0]
    died_at, observed_at = float(death["died_at"]), float(death["observed_at"])
    exited = of(events, EventType.TASK_EXITED, attempt=0)
    stopped_at = max([ts(e) for e in exited], default=observed_at)
    restarting = one(events, EventType.JOB_RESTARTING, "no restart", attempt=1)
    found = of(events, EventType.CHECKPOINT_FOUND, attempt=0)
    restart = attempt_start(events, 1, timing_dir)
    figures = fault_figures(events, injected)
    if figures.steps_lost is None:
        raise BenchmarkError("drill figures: no steps lost figure")
    resume_step = one(events, EventType.ATTEMPT_STARTED, "no attempt 1", attempt=1).get("resume_step")
    exits = tuple(f"{e.get('task')}: " + (str(e.get("signal")) if e.get("signal")
                                          else f"exit {e.get('exit_code')}") for e in exited)
    return DrillSample(
        detection_ms=float(death["detection_latency_ms"]),
        end_to_end_ms=(observed_at - ts(injected)) * 1000, died_at=died_at,
        injected_at=ts(injected), observed_at=observed_at, stopped_at=stopped_at,
        lookup_at=ts(found[0]) if found else ts(restarting), restarting_at=ts(restarting),
        restart=restart, steps_lost=figures.steps_lost,
        resume_step=-1 if resume_step is None else int(resume_step),
        cold=cold_sample(events, popen_at, timing_dir, attempt=0), stop_exits=exits)
