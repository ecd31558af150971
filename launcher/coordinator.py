"""The coordinator loop: plan an attempt, start one agent per host, react to what they report,
tear everything down on the first failure, and let the policy decide what comes next.

One thread runs the loop; agent reader threads and signal handlers only put items on one queue, so
every decision is made in one place, in the order things happened.
"""

from __future__ import annotations

import queue
import signal
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from launcher.backends.base import (
    AgentClosed,
    AgentEvent,
    AgentHandle,
    AgentStartError,
    Backend,
)
from launcher.console import Console
from launcher.events import EventLog
from launcher.failures import FailureKind, TaskFailure, format_report, is_port_conflict
from launcher.outcome import AttemptResult, AttemptStatus
from launcher.plan import HostPlan, LaunchPlan, ResumePoint, TaskPlan, plan, ports_to_allocate
from launcher.policy import Action, Decision, decide
from launcher.ports import PortAllocator
from launcher.rundir import RunDir
from launcher.spec import ClusterSpec
from launcher.state import JobState, JobStateMachine
from launcher.task_logs import TaskLogs
from worker.protocol import AgentError, Exited, Output, Progress, Started, TaskReport, Terminate
from worker.tfconfig import TaskId

#: task_progress events are written at most this often per task (every step still counts).
PROGRESS_EVENT_INTERVAL_S = 1.0
#: Extra time, beyond the grace period, that agents get to report their tasks gone.
TEARDOWN_MARGIN_S = 10.0


@dataclass(frozen=True)
class Interrupt:
    signum: int

    @property
    def name(self) -> str:
        return signal.Signals(self.signum).name


QueueItem = AgentEvent | Interrupt


@dataclass
class TaskRuntime:
    plan: TaskPlan
    state: str = "pending"  # pending, running, succeeded, failed, stopped
    pid: int | None = None
    step: int | None = None
    last_progress_at: float | None = None
    last_progress_event: float = 0.0
    exit_code: int | None = None
    signal: str | None = None


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
    def __init__(self, spec: ClusterSpec, run_dir: RunDir, backend: Backend, console: Console,
                 *, ports: PortAllocator | None = None, local_python: str = "python3",
                 base_dir: str = ".") -> None:
        self.spec = spec
        self.run_dir = run_dir
        self.backend = backend
        self.console = console
        self.ports = ports or PortAllocator()
        self.local_python = local_python
        self.base_dir = base_dir
        self.queue: queue.SimpleQueue[QueueItem] = queue.SimpleQueue()
        self.machine = JobStateMachine()
        self.events: EventLog | None = None
        self._port_tasks = ports_to_allocate(spec)

    # --- entry points ------------------------------------------------------------------------

    def interrupt(self, signum: int, _frame: Any = None) -> None:
        """Signal handler: ask the loop to stop every task and fail the job. Async-signal-safe
        enough for Python (SimpleQueue.put is reentrant)."""
        self.queue.put(Interrupt(signum))

    def run(self) -> JobResult:
        self.run_dir.create()
        self.events = EventLog(self.run_dir.events)
        started = time.time()
        try:
            result = self._run_job()
        finally:
            self.ports.close()
        self._write_summary(result, started)
        self.events.close()
        return result

    # --- the job -----------------------------------------------------------------------------

    def _emit(self, event: str, **fields: Any) -> None:
        if self.events is not None:
            self.events.emit(event, **fields)

    def _allocate(self, avoid: frozenset[int] = frozenset()) -> dict[TaskId, int]:
        numbers = self.ports.allocate(len(self._port_tasks), avoid=avoid)
        return dict(zip(self._port_tasks, numbers, strict=True))

    def _run_job(self) -> JobResult:
        spec = self.spec
        ports = self._allocate()
        self._emit("job_started", job=spec.name, run_dir=str(self.run_dir.path),
                   tasks=[str(s.task) for s in spec.task_slots()],
                   hosts=sorted({s.host for s in spec.task_slots()}))
        history: list[AttemptResult] = []
        resume: ResumePoint | None = None
        attempt = 0
        while True:
            launch_plan = plan(spec, attempt=attempt, run_dir=str(self.run_dir.path), ports=ports,
                               resume=resume, local_python=self.local_python,
                               base_dir=self.base_dir)
            history.append(self._run_attempt(launch_plan))
            decision = decide(history, spec.restart, ports_allocated=bool(self._port_tasks))
            if decision.action is Action.SUCCEED:
                self.machine.to(JobState.SUCCEEDED)
                self._emit("job_succeeded", job=spec.name, attempts=len(history))
                return JobResult(spec.name, JobState.SUCCEEDED, 0, decision.reason, history)
            if decision.action is Action.FAIL:
                return self._fail(history, decision)
            self.machine.to(JobState.RESTARTING)
            self._emit("job_restarting", attempt=attempt + 1, reason=decision.reason,
                       backoff_s=decision.backoff_s, counts_against_budget=decision.counts,
                       resume_step=None if resume is None else resume.step)
            self.console.warn(f"restarting the job ({decision.reason}) in "
                              f"{decision.backoff_s:.1f}s")
            if decision.fresh_ports:
                old = self.ports.held
                self.ports.release(old)
                ports = self._allocate(avoid=old)
            interrupt = self._wait(decision.backoff_s)
            if interrupt is not None:
                return self._fail(history, Decision(Action.FAIL,
                                                    f"tfcluster was stopped by {interrupt.name}"),
                                  exit_code=128 + interrupt.signum)
            attempt += 1

    def _fail(self, history: list[AttemptResult], decision: Decision,
              exit_code: int | None = None) -> JobResult:
        self.machine.to(JobState.FAILED)
        last = history[-1]
        cause = last.root_cause
        if exit_code is None:
            if last.interrupt_signal is not None:
                exit_code = 128 + int(signal.Signals[last.interrupt_signal])
            else:
                exit_code = cause.job_exit_code if cause else 1
        self._emit("job_failed", job=self.spec.name, reason=decision.reason,
                   exit_code=exit_code, attempts=len(history),
                   root_cause=None if cause is None else cause.to_dict())
        return JobResult(self.spec.name, JobState.FAILED, exit_code, decision.reason, history)

    def _wait(self, seconds: float) -> Interrupt | None:
        """Sleep out a backoff, but wake at once for Ctrl-C / SIGTERM."""
        deadline = time.monotonic() + seconds
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            try:
                item = self.queue.get(timeout=left)
            except queue.Empty:
                return None
            if isinstance(item, Interrupt):
                return item

    # --- one attempt -------------------------------------------------------------------------

    def _run_attempt(self, launch_plan: LaunchPlan) -> AttemptResult:
        return _Attempt(self, launch_plan).run()

    def _write_summary(self, result: JobResult, started: float) -> None:
        cause = result.root_cause
        self.run_dir.write_summary({
            "job": result.job,
            "status": result.state.value,
            "exit_code": result.exit_code,
            "reason": result.reason,
            "run_dir": str(self.run_dir.path),
            "started_at": started,
            "ended_at": time.time(),
            "duration_s": round(time.time() - started, 3),
            "restarts": len(result.attempts) - 1,
            "root_cause": None if cause is None or result.state is JobState.SUCCEEDED
            else cause.to_dict(),
            "attempts": [a.to_dict() for a in result.attempts],
        })


class _Attempt:
    """The state of one attempt; lives only while :meth:`run` runs."""

    def __init__(self, owner: Coordinator, launch_plan: LaunchPlan) -> None:
        self.owner = owner
        self.plan = launch_plan
        self.console = owner.console
        self.tasks = {str(t.task): TaskRuntime(t) for t in launch_plan.tasks}
        self.logs = TaskLogs(owner.run_dir, launch_plan.attempt)
        self.handles: dict[str, AgentHandle] = {}
        self.open_agents: set[str] = set()
        self.failures: list[TaskFailure] = []
        self.stopping_since: float | None = None
        self.interrupt: Interrupt | None = None
        self.started_at = time.time()

    def emit(self, event: str, **fields: Any) -> None:
        fields.setdefault("attempt", self.plan.attempt)
        self.owner._emit(event, **fields)

    def run(self) -> AttemptResult:
        self.owner.machine.to(JobState.STARTING)
        self.emit("attempt_started", resume_step=None if self.plan.resume is None
                  else self.plan.resume.step,
                  ports={str(t.task): t.port for t in self.plan.tasks if t.port is not None})
        try:
            self._start_agents()
            self._loop(lambda: self.stopping_since is None and not self._all_succeeded())
            self._shutdown(terminate=self.stopping_since is not None)
        finally:
            for handle in self.handles.values():  # no-op after a clean shutdown
                handle.close(timeout_s=self.plan.grace_period_s)
            self.logs.close()
        return self._result()

    def _result(self) -> AttemptResult:
        if self.interrupt is not None:
            status = AttemptStatus.INTERRUPTED
        elif self.failures or not self._all_succeeded():
            status = AttemptStatus.FAILED
        else:
            status = AttemptStatus.SUCCEEDED
        steps = [t.step for t in self.tasks.values() if t.step is not None]
        return AttemptResult(
            attempt=self.plan.attempt, status=status, started_at=self.started_at,
            ended_at=time.time(), failures=tuple(self.failures),
            ports={str(t.task): t.port for t in self.plan.tasks if t.port is not None},
            resume_step=None if self.plan.resume is None else self.plan.resume.step,
            max_step=max(steps) if steps else None,
            interrupt_signal=None if self.interrupt is None else self.interrupt.name)

    def _all_succeeded(self) -> bool:
        return all(t.state == "succeeded" for t in self.tasks.values())

    # --- start -------------------------------------------------------------------------------

    def _start_agents(self) -> None:
        """Start every host's agent at once (SSH connections are slow; do not queue them)."""
        run_dir = self.owner.run_dir

        def start(host: HostPlan) -> AgentHandle:
            return self.owner.backend.start(
                host, self.plan.launch_message(host), self.owner.queue.put,
                run_dir.agent_log(self.plan.attempt, host.name))

        hosts = list(self.plan.hosts)
        with ThreadPoolExecutor(max_workers=max(1, len(hosts))) as pool:
            futures = [(host, pool.submit(start, host)) for host in hosts]
        for host, future in futures:
            try:
                handle = future.result()
            except AgentStartError as exc:
                now = time.time()
                for task in host.tasks:
                    self._record_failure(TaskFailure(
                        task=str(task.task), host=host.name, attempt=self.plan.attempt,
                        kind=FailureKind.LOST_HOST, died_at=now, observed_at=now,
                        message=str(exc)))
                self._stop(f"could not start the agent on {host.name}")
                continue
            self.handles[host.name] = handle
            self.open_agents.add(host.name)
        if self.stopping_since is not None:  # some host failed: stop those that did start
            for handle in self.handles.values():
                handle.send(Terminate(grace_period_s=self.plan.grace_period_s))

    # --- the loop ----------------------------------------------------------------------------

    def _loop(self, keep_going: Callable[[], bool], deadline: float | None = None) -> None:
        while keep_going():
            timeout = 1.0 if deadline is None else deadline - time.monotonic()
            if timeout <= 0:
                return
            try:
                item = self.owner.queue.get(timeout=timeout)
            except queue.Empty:
                continue
            self._dispatch(item)

    def _dispatch(self, item: QueueItem) -> None:
        if isinstance(item, Interrupt):
            if self.interrupt is None:
                self.interrupt = item
                self.console.warn(f"got {item.name}: stopping every task")
                self._stop(f"tfcluster got {item.name}")
            return
        if isinstance(item, AgentClosed):
            self._on_agent_closed(item)
            return
        message = item.message
        if isinstance(message, Output):
            self.logs.write(message.task, message.line)
            self.console.task_line(message.task, message.line)
        elif isinstance(message, Progress):
            self._on_progress(message, item.received_at)
        elif isinstance(message, Started):
            self._on_started(item.host, message)
        elif isinstance(message, Exited):
            self._on_exited(item.host, message, item.received_at)
        elif isinstance(message, TaskReport):
            self._on_report(message)
        elif isinstance(message, AgentError):
            self.console.error(f"agent on {item.host}: {message.message}")

    def _on_started(self, host: str, message: Started) -> None:
        runtime = self.tasks[message.task]
        runtime.state, runtime.pid = "running", message.pid
        self.emit("task_started", task=message.task, host=host, pid=message.pid,
                  log=str(self.logs.path(message.task)))
        if self.owner.machine.state is JobState.STARTING and all(
                t.state != "pending" for t in self.tasks.values()):
            self.owner.machine.to(JobState.RUNNING)

    def _on_progress(self, message: Progress, received_at: float) -> None:
        runtime = self.tasks[message.task]
        first = runtime.step is None
        runtime.step, runtime.last_progress_at = message.step, received_at
        if first or received_at - runtime.last_progress_event >= PROGRESS_EVENT_INTERVAL_S:
            runtime.last_progress_event = received_at
            self.emit("task_progress", task=message.task, step=message.step,
                      metrics=message.metrics, first=first)

    def _on_report(self, message: TaskReport) -> None:
        if message.kind == "ready":
            return
        self.console.say(f"{message.task} reported {message.kind}: {message.data}")

    def _on_exited(self, host: str, message: Exited, received_at: float) -> None:
        runtime = self.tasks[message.task]
        runtime.exit_code, runtime.signal = message.exit_code, message.signal
        if message.exit_code == 0:
            runtime.state = "succeeded"
            self.emit("task_exited", task=message.task, host=host, exit_code=0)
            return
        stopped_by_us = self.stopping_since is not None and message.ts >= self.stopping_since
        if stopped_by_us:
            runtime.state = "stopped"
            self.emit("task_exited", task=message.task, host=host,
                      exit_code=message.exit_code, signal=message.signal, stopped=True)
            return
        runtime.state = "failed"
        kind = FailureKind.SIGNALLED if message.signal else FailureKind.EXITED
        if message.error:
            kind = FailureKind.SPAWN_FAILED
        elif runtime.step is None and is_port_conflict(message.stderr_tail, message.traceback):
            kind = FailureKind.PORT_CONFLICT
        self._record_failure(TaskFailure(
            task=message.task, host=host, attempt=self.plan.attempt, kind=kind,
            died_at=message.ts, observed_at=received_at, exit_code=message.exit_code,
            signal=message.signal, traceback=message.traceback,
            stderr_tail=tuple(message.stderr_tail), message=message.error))
        self._stop(f"{message.task} failed")

    def _on_agent_closed(self, item: AgentClosed) -> None:
        self.open_agents.discard(item.host)
        if self.stopping_since is not None:
            return
        lost = [t for t in self.tasks.values()
                if t.plan.host == item.host and t.state in ("pending", "running")]
        for runtime in lost:
            runtime.state = "failed"
            self._record_failure(TaskFailure(
                task=str(runtime.plan.task), host=item.host, attempt=self.plan.attempt,
                kind=FailureKind.LOST_HOST, died_at=item.at, observed_at=time.time(),
                message=f"lost contact with its agent: {item.reason}"))
        if lost:
            self._stop(f"lost host {item.host}")

    def _record_failure(self, failure: TaskFailure) -> None:
        self.failures.append(failure)
        self.emit("task_failed", **failure.to_dict())

    # --- stop --------------------------------------------------------------------------------

    def _stop(self, reason: str) -> None:
        """Begin tearing down every task of every host at the same moment."""
        if self.stopping_since is not None:
            return
        self.stopping_since = time.time()
        self.owner.machine.to(JobState.STOPPING)
        self.emit("job_stopping", reason=reason)
        for handle in self.handles.values():
            handle.send(Terminate(grace_period_s=self.plan.grace_period_s))

    def _shutdown(self, terminate: bool) -> None:
        """EOF to every agent, collect what they still report, and verify nothing is left."""
        for handle in self.handles.values():
            handle.close_input()
        grace = self.plan.grace_period_s if terminate else 0.0
        self._loop(lambda: bool(self.open_agents),
                   deadline=time.monotonic() + grace + TEARDOWN_MARGIN_S)
        for host, handle in self.handles.items():
            leftovers = handle.close(timeout_s=2.0)
            if leftovers:
                self.console.warn(f"{host}: killed {len(leftovers)} process(es) left behind "
                                  f"by the attempt: {leftovers}")
        while True:  # the agents' last words (e.g. AgentClosed) after close()
            try:
                item = self.owner.queue.get_nowait()
            except queue.Empty:
                break
            self._dispatch(item)
        if self.failures:
            self.console.error(format_report(self.failures, self.plan.job))
