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

from launcher.job.memory import MIB, MemoryReading, oom_note, warning_text
from launcher.job.straggler import StepRate, StragglerDetector, slowest
from launcher.output.metrics import JobFigures, MetricsSink, Report
from launcher.run.events import Event, JobHealth, TaskMemoryHigh, TaskStraggling
from launcher.spec.health import HealthSpec
from worker.wire.protocol import Exited, Heartbeat, Progress, Started

#: ``job_health`` is emitted at most this often (or every half straggler window if shorter).
HEALTH_EVENT_INTERVAL_S = 5.0


@dataclass
class _Task:
    host: str = "-"
    running: bool = False
    rate: StepRate = field(default_factory=StepRate)
    reported: bool = False  # reported a step in this attempt
    cpu_percent: float | None = None
    cpu_sum: float = 0.0
    cpu_samples: int = 0
    memory: MemoryReading | None = None
    peak_rss_bytes: int = 0
    warned: bool = False  # about memory, in this attempt
    steps_per_s: float | None = None  # as last computed (None: not running, or no rate yet)
    last_steps_per_s: float | None = None  # the last rate it had (for the summary)


class TaskHealthWatch:
    def __init__(self, health: HealthSpec, *, emit: Callable[[Event], None],
                 warn: Callable[[str], None], metrics: MetricsSink | None = None,
                 interval_s: float = HEALTH_EVENT_INTERVAL_S) -> None:
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
        self.slowest: str | None = None
        self.straggler_log: list[dict[str, Any]] = []
        self.memory_log: list[dict[str, Any]] = []

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
        elif isinstance(message, Exited):
            self.task(message.task).running = False
        if self.next_tick is None:
            self.next_tick = now + self.interval_s
        elif now >= self.next_tick:
            self.next_tick = now + self.interval_s
            self.tick(now)

    def _new_attempt(self, attempt: int) -> None:
        self.attempt = attempt
        self.stragglers.reset()
        for state in self.tasks.values():
            state.rate.reset()
            state.reported = state.warned = state.running = False
            state.steps_per_s = state.memory = None  # nothing of the last attempt's processes

    def _progress(self, attempt: int, message: Progress, now: float) -> None:
        state = self.task(message.task)
        state.rate.add(now, message.step)
        restart = not state.reported and attempt > 0
        state.reported = True
        if self.metrics is not None:
            self.metrics.report(Report(ts=message.ts, attempt=attempt, task=message.task,
                                       step=message.step, metrics=message.metrics,
                                       restart=restart))

    def _heartbeat(self, attempt: int, host: str, message: Heartbeat, now: float) -> None:
        for name, usage in message.tasks.items():
            state = self.task(name)
            state.host = host
            state.cpu_percent = usage.cpu_percent
            state.cpu_sum += usage.cpu_percent
            state.cpu_samples += 1
            state.peak_rss_bytes = max(state.peak_rss_bytes, usage.rss_bytes)
            reading = state.memory = MemoryReading(usage.rss_bytes, message.available_bytes, now)
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
        found = {}
        for name, state in self.tasks.items():
            rate = state.rate.rate(now) if state.running else None
            state.steps_per_s = rate
            if rate is not None:
                found[name] = state.last_steps_per_s = rate
        return found

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
        job_rate = min(rates.values()) if rates else None
        self.emit(JobHealth(attempt, tasks=self._figures(), slowest=self.slowest,
                            steps_per_s=None if job_rate is None else round(job_rate, 3),
                            stragglers=sorted(self.stragglers.flagged)))
        steps = [s for t in self.tasks.values() if t.running and (s := t.rate.step) is not None]
        if self.metrics is not None and job_rate is not None and steps:
            self.metrics.job(JobFigures(ts=now, step=min(steps), values={"steps_per_s": job_rate}))

    def _figures(self) -> dict[str, dict[str, Any]]:
        return {name: {"host": s.host, "step": s.rate.step,
                       "steps_per_s": None if s.steps_per_s is None else round(s.steps_per_s, 3),
                       "cpu_percent": s.cpu_percent,
                       "rss_bytes": None if s.memory is None else s.memory.rss_bytes,
                       "available_bytes": None if s.memory is None else s.memory.available_bytes}
                for name, s in sorted(self.tasks.items()) if s.running}

    def oom_note(self, task: str) -> str | None:
        """For a task killed by a SIGKILL tfcluster did not send: a likely OOM kill, said so."""
        state = self.tasks.get(task)
        if state is None:
            return None
        return oom_note(state.memory, ratio=self.health.memory_warn_ratio,
                        limit_bytes=self.limit_bytes, warned=state.warned)

    def summary(self) -> dict[str, Any]:
        """``summary.json``'s ``health``: per task its last step (of the last attempt it ran in),
        last steps/s, mean CPU %, last and peak RSS; the slowest task; every straggler and memory
        warning."""
        return {
            "tasks": {name: {"step": s.rate.step,
                             "steps_per_s": None if s.last_steps_per_s is None
                             else round(s.last_steps_per_s, 3),
                             "cpu_percent_mean": None if not s.cpu_samples
                             else round(s.cpu_sum / s.cpu_samples, 1),
                             "rss_bytes": None if s.memory is None else s.memory.rss_bytes,
                             "peak_rss_bytes": s.peak_rss_bytes or None}
                      for name, s in sorted(self.tasks.items())},
            "slowest": self.slowest,
            "stragglers": self.straggler_log,
            "memory_warnings": self.memory_log,
        }

    def close(self) -> dict[str, Any]:
        """The summary sections (``health``, ``metrics``), the metrics written out first."""
        metrics = None if self.metrics is None else self.metrics.close()
        return {"health": self.summary(), "metrics": metrics}

    @classmethod
    def for_run(cls, health: HealthSpec, run_dir: Path, emit: Callable[[Event], None],
                warn: Callable[[str], None]) -> TaskHealthWatch:
        """The watch of a job whose metrics go to ``run_dir`` (metrics.jsonl, tensorboard/)."""
        return cls(health, emit=emit, warn=warn, metrics=MetricsSink(run_dir, warn=warn),
                   interval_s=min(HEALTH_EVENT_INTERVAL_S, health.straggler_window_s / 2))
