"""The job loop: plan an attempt, run it, find the checkpoint to resume from, let the policy decide,
and carry the decision out (restart with backoff, succeed, or fail with the root cause).

One thread runs the loop; agent reader threads and signal handlers only put items on one inbox
(:class:`~launcher.job.attempt.AttemptRunner` reads it), so every decision is made in one place.
The coordinator alone owns the job's :class:`~launcher.job.state.JobStateMachine`.

Around the loop, :meth:`Coordinator.run` guards what the job shares with other runs: the chief's
checkpoint directory is locked for the whole run (:mod:`launcher.chief.lock`), the run
directory must be this run's alone, and a run directory that breaks mid-job ends the job cleanly
(:class:`~launcher.run.directory.RunDirError`). It also reads the preemption notices out of the
events (:mod:`launcher.job.preemption_notices`) so that the policy can tell a real preemption from
a bare exit 143.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import os
import queue
import signal
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from launcher.backends.base import AgentClosed
from launcher.backends.engine import Backend, Session
from launcher.backends.session import PlainSession
from launcher.chief.checkpoints import remove_worker_temp_dirs
from launcher.job.agents import AgentSet
from launcher.job.attempt import AttemptRunner
from launcher.job.failure_rules import judged
from launcher.job.health import in_force
from launcher.job.hooks import AttemptHooks, HookList
from launcher.job.inbox import Inbox, InboxItem, Interrupt
from launcher.job.policy import Action, Decision, decide, restarts_used
from launcher.job.pool_keeper import GrowWatch, HostsWaitInterrupted, PoolKeeper
from launcher.job.preemption_notices import PreemptionNotices
from launcher.job.ps_attempt import PsAttemptRunner, SingleRestarts
from launcher.job.reservation import Reservation, reserve
from launcher.job.resume import FRESH, StartingPoint
from launcher.job.resume_point import find_resume, latest_resume
from launcher.job.seams import LoopSeams
from launcher.job.spare_fill import first_checkpoint_watch
from launcher.job.state import JobState, JobStateMachine
from launcher.job.task_health import TaskHealthWatch
from launcher.output.console import Console
from launcher.plan.planner import LaunchPlan, Planner, ResumePoint
from launcher.plan.pool import TooFewHosts
from launcher.plan.ports import port_is_free
from launcher.run.directory import RunDir, RunDirError
from launcher.run.event_log import EventLog, Listener
from launcher.run.events import (
    Event,
    JobFailed,
    JobRestarting,
    JobStarted,
    JobSucceeded,
)
from launcher.run.failures import TaskFailure, exit_code_for_signal
from launcher.run.outcome import AttemptResult, AttemptStatus
from launcher.run.restart_line import restart_from
from launcher.run.summary import job_summary
from worker.wire.tfconfig import TaskId

#: How long a restart waits for the previous attempt's ports to be released.
PORT_FREE_WAIT_S = 5.0

@dataclass
class JobResult:
    job: str
    state: JobState
    exit_code: int
    reason: str
    attempts: list[AttemptResult] = field(default_factory=list)

    @property
    def root_cause(self) -> TaskFailure | None:
        for attempt in reversed(self.attempts):
            if attempt.root_cause is not None:
                return attempt.root_cause
        return None


class Coordinator:
    """Runs one job: ``planner`` says what each attempt starts, ``backend`` (the engine) places
    and starts it, ``session`` is the engine's part of this run, ``reservation`` what the run
    holds before its first attempt (taken by :func:`reserve` if not given), ``hooks`` and
    ``listeners`` what watches it (a drill, the console), ``start`` where it starts (attempt 0, or
    after a resumed run's attempts), ``seams`` its time, threads and ports."""

    def __init__(self, planner: Planner, run_dir: RunDir, backend: Backend, console: Console,
                 *, session: Session | None = None, reservation: Reservation | None = None,
                 hooks: AttemptHooks | None = None, listeners: Sequence[Listener] = (),
                 start: StartingPoint = FRESH, seams: LoopSeams | None = None) -> None:
        seams = seams or LoopSeams()
        self.planner = planner
        self.spec = planner.spec
        self.run_dir, self.backend = run_dir, backend
        self.session = session or PlainSession()
        self.console = console
        self.reservation = reservation
        self.ports = seams.ports  # the reservation's, once the run starts
        self.listeners = list(listeners)
        self.clock = seams.clock
        self._new_inbox = seams.new_inbox
        self.queue: Inbox = self._new_inbox()
        self.agents = AgentSet(backend, self._to_inbox, seams.clock, seams.spawn)
        self.machine = JobStateMachine()
        self.events: EventLog | None = None
        self.bad_checkpoints: set[str] = set(start.bad_checkpoints)
        self.start, self.history = start, list(start.history)  # start: where --resume begins
        self._notices = PreemptionNotices()
        self._port_tasks = planner.ports_to_allocate
        self.watch = TaskHealthWatch.for_run(self.spec.health, run_dir.path, self._emit,
                                             console.warn, not self.spec.parameter_server)
        self.keeper: PoolKeeper | None = None  # a pool's (launcher.job.pool_keeper)
        self.grow: GrowWatch | None = None
        self.exhausted: TooFewHosts | None = None
        #: A parameter_server job's single-task restarts (launcher.job.ps_attempt).
        self.single = SingleRestarts(self.spec.restart, latest=lambda: None) \
            if self.spec.parameter_server else None
        if planner.pool is not None:
            self.keeper = PoolKeeper(planner.pool, backend, job=self.spec.name, console=console,
                                     emit=self._emit, clock=self.clock)
            self.grow = GrowWatch(self.keeper, self._to_inbox,
                                  lambda work: seams.spawn("grow-probe", work))
        self.hooks = HookList(hooks, self.grow, first_checkpoint_watch(
            self.spec, self.agents.send_all, backend.chief_files))

    # --- entry points ------------------------------------------------------------------------

    def interrupt(self, signum: int, _frame: Any = None) -> None:
        """Signal handler: stop every task and fail the job (SimpleQueue.put is reentrant)."""
        self.queue.put(Interrupt(signum))

    def run(self) -> JobResult:
        """Run the job to its end. Raises, before anything starts, :class:`RunDirError` for an
        unusable run directory and ``CheckpointDirInUse`` when another live run holds the
        checkpoint directory (locked for this whole run). A run directory that breaks later (disk
        full, removed) stops every task, records ``job_failed`` and ``summary.json`` as far as
        they can still be written, and raises :class:`RunDirError`."""
        reservation = self.reservation or reserve(self.planner, self.run_dir,
                                                  self.backend.chief_files, ports=self.ports)
        self.ports = reservation.allocator
        try:
            reservation.warnings.to(self.console.warn)
            started = self.start.started_at or self.clock()
            try:
                self.events = EventLog(self.run_dir.events, self.clock)
                for listener in self.listeners:
                    self.events.subscribe(listener)
                try:
                    result = self._run_job(reservation.ports)
                finally:
                    self._end_agents()
                if self.exhausted is None:
                    self._tidy_checkpoint_dir()
                self.run_dir.write_summary(self._summary(result, started))
            except OSError as exc:
                if not self.run_dir.caused(exc):
                    raise
                raise self._run_dir_broke(exc, started) from exc
            finally:
                if self.events is not None:
                    with contextlib.suppress(OSError):
                        self.events.close()
        finally:
            reservation.release()
        return result

    def _tidy_checkpoint_dir(self) -> None:
        """Every task is gone: remove the copies non-chief tasks left (never the chief's)."""
        preview = self.planner.preview() if self.spec.checkpoint is not None else None
        if preview is not None and preview.checkpoint_dir is not None:  # (None: no plan made)
            with self.backend.chief_files.fs(preview.chief_host) as fs, \
                    contextlib.suppress(OSError):
                if fs is not None:
                    remove_worker_temp_dirs(preview.checkpoint_dir, fs)

    def _summary(self, result: JobResult, started: float) -> dict[str, Any]:
        """``summary.json``: the job's outcome, per-task health and what was kept of the metrics,
        and the engine's sections."""
        return job_summary(job=result.job, status=result.state.value, exit_code=result.exit_code,
                           reason=result.reason, attempts=result.attempts,
                           run_dir=str(self.run_dir.path), started=started,
                           sections={**self.watch.close(),
                                     **self.session.summary(result.attempts),
                                     **(self.keeper.summary() if self.keeper else {}),
                                     **(self.single.summary() if self.single else {}),
                                     **({"events": self.events.summary()} if self.events else {})})

    def _run_dir_broke(self, exc: OSError, started: float) -> RunDirError:
        """The run directory failed mid-job; the attempt's agents were closed on the way out (every
        task stopped). Record the failure as far as the directory still takes it."""
        doing = "while writing to it" if exc.filename is None \
            else f"while writing {os.fsdecode(exc.filename)}"
        error = RunDirError.from_os_error(self.run_dir.path, exc, doing)
        state = self.machine.state
        if state is JobState.PENDING:  # nothing was started
            return error
        if state in (JobState.SUCCEEDED, JobState.FAILED):  # only summary.json is missing
            return RunDirError(self.run_dir.path, f"{error.detail}; the job itself {state.value}")
        if state in (JobState.STARTING, JobState.RUNNING):
            self.machine.to(JobState.STOPPING)
        self.machine.to(JobState.FAILED)
        result = JobResult(self.spec.name, JobState.FAILED, error.exit_code, str(error),
                           list(self.history))
        with contextlib.suppress(OSError):
            self._emit(JobFailed(job=self.spec.name, reason=str(error), exit_code=error.exit_code,
                                 attempts=len(self.history), root_cause=None))
        with contextlib.suppress(OSError):
            self.run_dir.write_summary(self._summary(result, started))
        return RunDirError(self.run_dir.path, f"{error.detail}; every task was stopped")

    # --- the job -----------------------------------------------------------------------------

    def _emit(self, event: Event) -> None:
        self._notices.observe(event)
        if self.events is not None:
            self.events.emit(event)

    def _to_inbox(self, item: InboxItem) -> None:
        """Agents outlive attempts: what they say goes to the inbox of the attempt running now."""
        self.queue.put(item)

    def _fresh_queue(self) -> None:
        """A new inbox per attempt, so nothing late from the last attempt can reach the next one;
        a pending Ctrl-C / SIGTERM is carried over, and an agent lost meanwhile is noted."""
        old, self.queue = self.queue, self._new_inbox()
        while True:
            try:
                item = old.get_nowait()
            except queue.Empty:
                return
            self._between_attempts(item)

    def _between_attempts(self, item: InboxItem) -> Interrupt | None:
        """What matters of an item that arrives between two attempts."""
        if isinstance(item, Interrupt):
            self.queue.put(item)
            return item
        if isinstance(item, AgentClosed):
            self.agents.closed(item.host)
        return None

    def _end_agents(self) -> None:
        """The job is over: end every agent (each kills what is left of its tasks)."""
        for host, pids in self.agents.close_all(self.spec.health.grace_period_s).items():
            self.console.warn(f"{host}: killed {len(pids)} process(es) left behind: {pids}")

    def _allocate(self, avoid: frozenset[int] = frozenset()) -> dict[TaskId, int]:
        numbers = self.ports.allocate(len(self._port_tasks), avoid=avoid)
        return dict(zip(self._port_tasks, numbers, strict=True))

    def _phase(self, state: JobState) -> None:
        """An attempt entered a new phase (starting, running, stopping)."""
        if self.machine.state is not state:
            self.machine.to(state)

    def _run_job(self, ports: dict[TaskId, int]) -> JobResult:
        spec = self.spec
        history = self.history
        placement = self.planner.placement(history)
        self._emit(JobStarted(job=spec.name, run_dir=str(self.run_dir.path),
                              tasks=[str(p.task) for p in placement.tasks],
                              hosts=sorted({h.name for h in placement.hosts})))
        attempt = self.start.first_attempt  # after the last attempt, for tfcluster run --resume
        resume = self.start.resume(self.planner, ports, history, self._after_failure, self._emit)
        while True:
            if self.keeper is not None and (ended := self._place(attempt)) is not None:
                return ended
            launch_plan = self.planner.plan(attempt, ports, resume, history)
            for event in self.session.attempt_events(attempt, history, launch_plan.hosts):
                self._emit(event)
            self._fresh_queue()
            result = self._runner(launch_plan).run()
            self.bad_checkpoints |= result.bad_checkpoints
            result = dataclasses.replace(result, preemption_notice=self._notices.of(attempt))
            if result.status in (AttemptStatus.FAILED, AttemptStatus.RESIZED):
                result, resume = self._after_failure(launch_plan, result, resume)
            history.append(judged(result, history, spec.restart.rules))
            decision = decide(history, spec.restart, ports_allocated=bool(self._port_tasks),
                              pooled=self.keeper is not None)
            if self.keeper is not None:
                self.keeper.after_attempt(result, self.grow.back if self.grow else (), decision.leave_out)
            if decision.action is Action.SUCCEED:
                self.machine.to(JobState.SUCCEEDED)
                self._emit(JobSucceeded(job=spec.name, attempts=len(history)))
                return JobResult(spec.name, JobState.SUCCEEDED, 0, decision.reason, history)
            if decision.action is Action.FAIL:
                return self._fail(history, decision)
            self.machine.to(JobState.RESTARTING)
            self._emit(JobRestarting(
                attempt=attempt + 1, reason=decision.reason, backoff_s=decision.backoff_s,
                counts_against_budget=decision.counts, resume_step=getattr(resume, "step", None),
                resume_checkpoint=None if resume is None else resume.checkpoint))
            start = restart_from(resume, launch_plan.checkpoint_dir, history)
            self.console.warn(f"restarting the job in {decision.backoff_s:.1f}s from {start}: "
                              f"{decision.reason}")
            if decision.fresh_ports or not self._ports_free(ports):
                old = self.ports.held
                self.ports.release(old)
                ports = self._allocate(avoid=old)
            interrupt = self._wait(decision.backoff_s)
            if interrupt is not None:
                return self._fail(history, Decision(Action.FAIL,
                                                    f"tfcluster was stopped by {interrupt.name}"),
                                  exit_code=exit_code_for_signal(interrupt.signum))
            attempt += 1

    def _runner(self, launch_plan: LaunchPlan) -> AttemptRunner:
        """The attempt's runner: a parameter_server job's restarts single tasks."""
        common: dict[str, Any] = dict(
            agents=self.agents, inbox=self.queue, run_dir=self.run_dir, console=self.console,
            emit=self._emit, phase=self._phase, health=in_force(self.spec.health, self.history),
            hooks=self.hooks, clock=self.clock, watch=self.watch)
        if self.single is None:
            return AttemptRunner(launch_plan, **common)
        self.single.used_before = restarts_used(self.history)
        self.single.latest = functools.partial(latest_resume, launch_plan,
                                               chief_files=self.backend.chief_files,
                                               bad=self.bad_checkpoints)
        return PsAttemptRunner(launch_plan, single=self.single, **common)

    def _place(self, attempt: int) -> JobResult | None:
        """Place ``attempt`` from the pool; the job's end when no placement can be had."""
        assert self.keeper is not None
        self.agents.drop(set(self.agents.handles) - set(self.keeper.pool.usable), 1.0)
        try:
            self.keeper.place(attempt, self._wait)
        except TooFewHosts as exc:
            if self.session.requeues_without_hosts:
                raise  # the engine ends the run, to be run again without them
            self.exhausted = exc
            return self._fail(self.history, Decision(Action.FAIL, str(exc)), exit_code=1)
        except HostsWaitInterrupted as stop:
            return self._fail(self.history, Decision(
                Action.FAIL, f"tfcluster was stopped by {stop.interrupt.name}"),
                exit_code=exit_code_for_signal(stop.interrupt.signum))
        return None

    def _ports_free(self, ports: dict[TaskId, int], wait_s: float = PORT_FREE_WAIT_S) -> bool:
        """Whether the previous attempt's local ports can be bound again (every process that
        held them is gone); waits briefly for the kernel to release them."""
        deadline = time.monotonic() + wait_s
        while True:
            busy = [port for port in ports.values() if not port_is_free(port)]
            if not busy:
                return True
            if time.monotonic() >= deadline:
                self.console.warn(f"ports {busy} are still in use after the attempt; "
                                  "the next attempt gets fresh ports")
                return False
            time.sleep(0.05)

    def _after_failure(self, launch_plan: LaunchPlan, result: AttemptResult,
                       previous: ResumePoint | None) -> tuple[AttemptResult, ResumePoint | None]:
        """Find the checkpoint the next attempt resumes from; clear non-chief leftovers."""
        return find_resume(launch_plan, result, previous, chief_files=self.backend.chief_files,
                           bad=self.bad_checkpoints, console=self.console, emit=self._emit,
                           shared_dir=self.keeper is not None)

    def _fail(self, history: list[AttemptResult], decision: Decision,
              exit_code: int | None = None) -> JobResult:
        self.machine.to(JobState.FAILED)
        last = history[-1]
        cause = last.root_cause
        if exit_code is None:
            if last.interrupt_signal is not None:
                exit_code = exit_code_for_signal(int(signal.Signals[last.interrupt_signal]))
            else:
                exit_code = cause.job_exit_code if cause else 1
        self._emit(JobFailed(job=self.spec.name, reason=decision.reason, exit_code=exit_code,
                             attempts=len(history), root_cause=cause))
        return JobResult(self.spec.name, JobState.FAILED, exit_code, decision.reason, history)

    def _wait(self, seconds: float) -> Interrupt | None:
        """Sleep out a backoff, but wake at once for Ctrl-C / SIGTERM; the agents, which outlive
        the attempt, keep being pinged meanwhile."""
        deadline = self.clock() + seconds
        interval = self.spec.health.heartbeat_interval_s
        next_ping = self.clock()
        while True:
            now = self.clock()
            if now >= deadline:
                return None
            if now >= next_ping:
                self.agents.ping()
                next_ping = now + interval
            try:
                item = self.queue.get(timeout=max(0.0, min(deadline, next_ping) - now))
            except queue.Empty:
                continue
            if (interrupt := self._between_attempts(item)) is not None:
                return interrupt
