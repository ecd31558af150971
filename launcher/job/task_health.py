"""Per-task health a person can act on, across the attempts of a job: steps/s, CPU % and RSS per
task, the slowest task, stragglers, memory running out; and every report's metrics to the
:class:`~launcher.output.metrics.MetricsSink`.

The attempt hands every agent message to :meth:`TaskHealthWatch.observe` with the time it arrived
(the watch reads no clock: tests script the times). Heartbeats arrive every
``health.heartbeat_interval_s`` from every agent, so the watch needs no timer of its own: at most
every :data:`HEALTH_EVENT_INTERVAL_S` it emits a ``job_health`` event (which the live view and
``tfcluster status`` show), and ``task_straggling`` / ``task_memory_high`` the moment they are true,
each with one console line. Nothing here stops a job: it tells.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from launcher.job.lockstep import WINDOW_S, Figures, LockstepWatch, UsageWindow, Verdict
from launcher.job.memory import (
    MIB,
    MemoryPast,
    MemoryReading,
    limit_kill_text,
    out_of_memory,
    warning_text,
)
from launcher.job.straggler import StepRate, StragglerDetector, slowest
from launcher.output.metrics import JobFigures, MetricsSink, Report
from launcher.run.events import Event, JobHealth, TaskMemoryHigh, TaskStraggling
from launcher.run.step_figures import TaskSteps, job_rate
from launcher.spec.health import HealthSpec
from worker.wire.protocol import Exited, Heartbeat, Progress, Started
from worker.wire.tfconfig import EVALUATOR

#: Without step reports, a task's figures count in the lock-step comparison only this long after
#: it started (importing TensorFlow and building the model are not training).
LOCKSTEP_SETTLE_S = 20.0

#: ``job_health`` is emitted at most this often (or every half straggler window if shorter).
HEALTH_EVENT_INTERVAL_S = 5.0
#: The job's steps/s goes to TensorBoard (``job/steps_per_s``) at most this often while it trains,
#: and once more when an attempt's last task exits.
JOB_FIGURES_INTERVAL_S = 1.0


@dataclass
class _Task:
    host: str = "-"
    running: bool = False
    rate: StepRate = field(default_factory=StepRate)  # over the last seconds: for stragglers
    #: Its steps/s as every view shows it (:mod:`launcher.run.step_figures`): this life's.
    steps: TaskSteps = field(default_factory=TaskSteps)
    life_attempt: int | None = None  # the attempt of its current process
    reported: bool = False  # reported a step in this attempt
    cpu_percent: float | None = None
    cpu_sum: float = 0.0
    cpu_samples: int = 0
    memory: MemoryReading | None = None
    peak_rss_bytes: int = 0
    warned: bool = False  # about memory, in this attempt
    killed_at: MemoryReading | None = None  # killed for passing memory_limit_mib (this process)
    started_at: float | None = None
    usage: UsageWindow = field(default_factory=UsageWindow)
    figures: Figures | None = None  # lock-step figures as last computed
    last_figures: Figures | None = None  # the last it had (for the summary)
    attempt_peak_rss: int = 0  # of this attempt's process


class TaskHealthWatch:
    def __init__(self, health: HealthSpec, *, emit: Callable[[Event], None],
                 warn: Callable[[str], None], metrics: MetricsSink | None = None,
                 interval_s: float = HEALTH_EVENT_INTERVAL_S, lockstep: bool = True) -> None:
        self.health = health
        self.emit = emit
        self.warn = warn
        self.metrics = metrics
        self.interval_s = interval_s
        self.limit_bytes = None if health.memory_limit_mib is None else health.memory_limit_mib * MIB
        self.attempt: int | None = None
        self.tasks: dict[str, _Task] = {}
        self.stragglers = StragglerDetector(health.straggler_ratio, health.straggler_window_s)
        self.next_tick: float | None = None
        self.next_job_figures = 0.0
        self.slowest: str | None = None
        self.straggler_log: list[dict[str, Any]] = []
        self.memory_log: list[dict[str, Any]] = []
        self.over_limit: list[str] = []
        #: Tasks step together (MultiWorkerMirroredStrategy): name the one holding them back.
        self.lockstep = LockstepWatch() if lockstep else None

    def task(self, name: str) -> _Task:
        if name not in self.tasks:
            self.tasks[name] = _Task()
        return self.tasks[name]

    # --- what arrives ------------------------------------------------------------------------

    def observe(self, attempt: int, host: str, message: object, now: float) -> None:
        if attempt != self.attempt:
            self._new_attempt(attempt)
        if isinstance(message, Progress):
            self._progress(attempt, message, now)
        elif isinstance(message, Heartbeat):
            self._heartbeat(attempt, host, message, now)
        elif isinstance(message, Started):
            state = self.task(message.task)
            state.host, state.running = host, True
            state.memory = state.killed_at = state.figures = None  # a new process
            state.warned, state.attempt_peak_rss, state.started_at = False, 0, now
            state.steps, state.life_attempt = TaskSteps(), attempt
            state.usage.reset()
        elif isinstance(message, Exited):
            self.task(message.task).running = False
            if not any(t.running for t in self.tasks.values()):
                self._job_figures(now, attempt, final=True)
        if self.next_tick is None:
            self.next_tick = now + self.interval_s
        elif now >= self.next_tick:
            self.next_tick = now + self.interval_s
            self.tick(now)

    def _new_attempt(self, attempt: int) -> None:
        self.attempt = attempt
        self.stragglers.reset()
        if self.lockstep is not None:
            self.lockstep.reset()
        for state in self.tasks.values():
            state.rate.reset()
            state.reported = state.warned = state.running = False
            state.memory = state.killed_at = None  # the last attempt's
            state.attempt_peak_rss = 0

    def _progress(self, attempt: int, message: Progress, now: float) -> None:
        state = self.task(message.task)
        state.rate.add(now, message.step)
        state.steps.add(now, message.step)
        if now >= self.next_job_figures:
            self._job_figures(now, attempt)
        restart = not state.reported and attempt > 0
        state.reported = True
        if self.metrics is not None:
            self.metrics.report(Report(ts=message.ts, attempt=attempt, task=message.task,
                                       step=message.step, metrics=message.metrics,
                                       restart=restart, dropped_metrics=message.dropped_metrics,
                                       replaced_reports=message.replaced_reports))

    def _heartbeat(self, attempt: int, host: str, message: Heartbeat, now: float) -> None:
        for name, usage in message.tasks.items():
            state = self.task(name)
            state.host = host
            state.cpu_percent = usage.cpu_percent
            state.cpu_sum += usage.cpu_percent
            state.cpu_samples += 1
            state.peak_rss_bytes = max(state.peak_rss_bytes, usage.rss_bytes)
            state.attempt_peak_rss = max(state.attempt_peak_rss, usage.rss_bytes)
            if usage.cpu_seconds is not None and usage.wait_seconds is not None:
                state.usage.add(now, usage.cpu_seconds, usage.wait_seconds)
            reading = state.memory = MemoryReading(usage.rss_bytes, message.available_bytes, now)
            if self.limit_bytes is not None and usage.rss_bytes > self.limit_bytes \
                    and state.killed_at is None:
                state.killed_at = reading
                self.over_limit.append(name)
                self.warn(limit_kill_text(name, reading, self.limit_bytes))
            if not state.warned and reading.high(self.health.memory_warn_ratio, self.limit_bytes):
                state.warned = True
                text = warning_text(name, reading, self.limit_bytes)
                self.memory_log.append({"attempt": attempt, "task": name, "at": now,
                                        "rss_bytes": usage.rss_bytes})
                self.warn(text)
                self.emit(TaskMemoryHigh(attempt, task=name, host=host, rss_bytes=usage.rss_bytes,
                                         available_bytes=message.available_bytes,
                                         limit_bytes=reading.limit(self.limit_bytes), message=text))

    # --- what it makes of it -----------------------------------------------------------------

    def rates(self, now: float) -> dict[str, float]:
        """The running tasks' steps/s over the last seconds (what stragglers are told by)."""
        found = {}
        for name, state in self.tasks.items():
            if state.running and (rate := state.rate.rate(now)) is not None:
                found[name] = rate
        return found

    def _job_figures(self, now: float, attempt: int, final: bool = False) -> None:
        """The job's steps/s (its slowest task's) and step to TensorBoard: the running tasks',
        or, ``final``, those of the attempt's tasks at its end (its last step)."""
        self.next_job_figures = now + JOB_FIGURES_INTERVAL_S
        tasks = [t.steps for t in self.tasks.values() if t.life_attempt == attempt
                 and (final or t.running)]
        steps = [step for t in tasks if (step := t.step) is not None]
        if self.metrics is not None and (rate := job_rate(tasks)) is not None:
            # the step every task had reached (at the end, the attempt's last step)
            self.metrics.job(JobFigures(ts=now, step=min(steps), values={"steps_per_s": rate}))

    def tick(self, now: float) -> None:
        """Straggler changes, then one ``job_health`` event and the job's steps/s."""
        attempt = self.attempt or 0
        rates = self.rates(now)
        for change in self.stragglers.update(rates, now):
            ratio, window = self.stragglers.ratio, self.stragglers.window_s
            if change.straggling:
                self.warn(f"{change.task} is a straggler: {change.rate:.2f} steps/s against "
                          f"{change.others_rate:.2f} for the others for {now - change.since:.0f}s; "
                          "every task waits for it (look at its host's load and its data input)")
                self.straggler_log.append({"attempt": attempt, "task": change.task,
                                           "since": change.since, "flagged_at": now,
                                           "steps_per_s": round(change.rate, 3),
                                           "others_steps_per_s": round(change.others_rate, 3)})
            self.emit(TaskStraggling(attempt, task=change.task, straggling=change.straggling,
                                     steps_per_s=round(change.rate, 3),
                                     others_steps_per_s=round(change.others_rate, 3),
                                     since=change.since, ratio=ratio, window_s=window))
        self.slowest = slowest(rates)
        rate = job_rate(t.steps for t in self.tasks.values() if t.running)
        held = self._look_lockstep(attempt, now, rate)
        named = set(self.stragglers.flagged) | ({held.task} if held else set())
        self.emit(JobHealth(attempt, tasks=self._figures(), slowest=self.slowest,
                            steps_per_s=None if rate is None else round(rate, 3),
                            stragglers=sorted(named),
                            held_back_by=None if held is None else self._held_text(held, rate)))

    # --- the lock-step job's straggler ----------------------------------------------------

    def _lockstep_figures(self, now: float) -> dict[str, Figures]:
        """The figures of the tasks training now: those that reported a step this attempt, or
        (a script that never reports) those started :data:`LOCKSTEP_SETTLE_S` ago."""
        reporting = any(s.reported for s in self.tasks.values() if s.running)
        found = {}
        for name, state in self.tasks.items():
            state.figures = state.usage.figures() if state.running else None
            state.last_figures = state.figures or state.last_figures
            settled = state.reported if reporting else (
                state.started_at is not None and now - state.started_at >= LOCKSTEP_SETTLE_S)
            if state.figures is not None and settled and not name.startswith(f"{EVALUATOR}:"):
                found[name] = state.figures
        return found

    def _held_text(self, verdict: Verdict, job_rate: float | None) -> str:
        step_s = 1 / job_rate if job_rate else None
        return verdict.text(self.task(verdict.task).host, step_s)

    def _look_lockstep(self, attempt: int, now: float, job_rate: float | None) -> Verdict | None:
        if self.lockstep is None:
            return None
        before = self.lockstep.named
        verdict, changed = self.lockstep.look(self._lockstep_figures(now))
        if not changed:
            return verdict
        if before is not None:
            self._emit_lockstep(attempt, before, False, now, job_rate)
        if verdict is not None:
            text = self._held_text(verdict, job_rate)
            self.warn(f"straggler: {text}")
            self.straggler_log.append({"attempt": attempt, "task": verdict.task,
                                       "since": now - WINDOW_S, "flagged_at": now,
                                       "cause": verdict.cause.value, "message": text})
            self._emit_lockstep(attempt, verdict, True, now, job_rate)
        return verdict

    def _emit_lockstep(self, attempt: int, verdict: Verdict, on: bool, now: float,
                       job_rate: float | None) -> None:
        rate = None if job_rate is None else round(job_rate, 3)
        mine, others = verdict.figures, verdict.others
        self.emit(TaskStraggling(
            attempt, task=verdict.task, straggling=on, steps_per_s=rate, others_steps_per_s=rate,
            since=now - WINDOW_S, ratio=self.stragglers.ratio, window_s=WINDOW_S,
            cause=verdict.cause.value, message=self._held_text(verdict, job_rate) if on else None,
            cpu_cores=round(mine.cpu, 3), wait_share=round(mine.wait_share, 3),
            others_cpu_cores=round(others.cpu, 3), others_wait_share=round(others.wait_share, 3)))

    def _figures(self) -> dict[str, dict[str, Any]]:
        return {name: {"host": s.host, "step": s.steps.step,
                       "steps_per_s": s.steps.rate,
                       "cpu_percent": s.cpu_percent,
                       "cpu_cores": None if s.figures is None else round(s.figures.cpu, 3),
                       "wait_share": None if s.figures is None else round(s.figures.wait_share, 3),
                       "rss_bytes": None if s.memory is None else s.memory.rss_bytes,
                       "available_bytes": None if s.memory is None else s.memory.available_bytes}
                for name, s in sorted(self.tasks.items()) if s.running}

    def over_memory_limit(self) -> list[str]:
        """The tasks to kill now: their RSS passed ``health.memory_limit_mib`` (each once)."""
        tasks, self.over_limit = self.over_limit, []
        return tasks

    def memory_note(self, message: Exited) -> str | None:
        """For a task that died: that it ran out of memory and how, or None."""
        state = self.tasks.get(message.task, _Task())
        if message.peak_rss_bytes:
            state.peak_rss_bytes = max(state.peak_rss_bytes, message.peak_rss_bytes)
        past = MemoryPast(state.memory, state.attempt_peak_rss, state.warned, state.killed_at)
        return out_of_memory(message, past, ratio=self.health.memory_warn_ratio,
                             limit_bytes=self.limit_bytes)

    def summary(self) -> dict[str, Any]:
        """``summary.json``'s ``health``: per task its last step (of the last attempt it ran in),
        last steps/s, mean CPU %, last and peak RSS; the slowest task; every straggler and memory
        warning."""
        return {
            "tasks": {name: {"step": s.steps.step,
                             "steps_per_s": s.steps.rate,
                             "cpu_percent_mean": None if not s.cpu_samples
                             else round(s.cpu_sum / s.cpu_samples, 1),
                             "rss_bytes": None if s.memory is None else s.memory.rss_bytes,
                             "peak_rss_bytes": s.peak_rss_bytes or None,
                             **self._last_figures(s)}
                      for name, s in sorted(self.tasks.items())},
            "slowest": self.slowest,
            "stragglers": self.straggler_log,
            "memory_warnings": self.memory_log,
        }

    @staticmethod
    def _last_figures(state: _Task) -> dict[str, float | None]:
        """The lock-step figures it last had (over the last window it ran)."""
        last = state.last_figures
        return {"cpu_cores": None if last is None else round(last.cpu, 3),
                "wait_share": None if last is None else round(last.wait_share, 3)}

    def close(self) -> dict[str, Any]:
        """The summary sections (``health``, ``metrics``), the metrics written out first."""
        metrics = None if self.metrics is None else self.metrics.close()
        return {"health": self.summary(), "metrics": metrics}

    @classmethod
    def for_run(cls, health: HealthSpec, run_dir: Path, emit: Callable[[Event], None],
                warn: Callable[[str], None], lockstep: bool = True) -> TaskHealthWatch:
        """The watch of a job whose metrics go to ``run_dir`` (metrics.jsonl, tensorboard/);
        ``lockstep``: its tasks step together (MultiWorkerMirroredStrategy)."""
        return cls(health, emit=emit, warn=warn, metrics=MetricsSink(run_dir, warn=warn),
                   interval_s=min(HEALTH_EVENT_INTERVAL_S, health.straggler_window_s / 2),
                   lockstep=lockstep)
