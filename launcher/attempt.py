"""One attempt of a job: start every host's agent, react to what they report, notice failures and
unhealthy tasks, and tear the whole attempt down (verified) when one task fails.

Everything arrives on one queue (agent reader threads, signal handlers), and this class alone
decides, in the order things happened. It sleeps on that queue until the next health deadline, so a
failure is handled the moment its message arrives, with no polling.
"""

from __future__ import annotations

import contextlib
import queue
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from launcher.backends.base import AgentClosed, AgentEvent, AgentHandle, AgentStartError, Backend
from launcher.console import Console
from launcher.drill import Fault
from launcher.failures import FailureKind, TaskFailure, format_report, is_port_conflict
from launcher.health import HealthIssue, HealthMonitor
from launcher.outcome import AttemptResult, AttemptStatus
from launcher.plan import HostPlan, LaunchPlan, TaskPlan
from launcher.rundir import RunDir
from launcher.spec import HealthSpec
from launcher.state import JobState, JobStateMachine
from launcher.task_logs import TaskLogs
from worker.env import PREEMPTION_EXIT_CODE
from worker.protocol import (
    AgentError,
    DumpStacks,
    Exited,
    Output,
    Ping,
    Progress,
    SignalTasks,
    Started,
    TaskReport,
    Terminate,
)
from worker.tfconfig import TRAINING_TYPES

#: task_progress events are written at most this often per task (every step still counts).
PROGRESS_EVENT_INTERVAL_S = 1.0
#: Extra time, beyond the grace period, that agents get to report their tasks gone.
TEARDOWN_MARGIN_S = 10.0
#: Longest wait, at teardown, for agent starts still under way (SSH connects are bounded).
START_WAIT_S = 120.0
#: How long the tasks' stack dumps get to reach the logs before a hung attempt is killed.
STACK_DUMP_WAIT_S = 1.0


@dataclass(frozen=True)
class Interrupt:
    """tfcluster itself got SIGINT / SIGTERM."""

    signum: int

    @property
    def name(self) -> str:
        return signal.Signals(self.signum).name


@dataclass(frozen=True)
class AgentUp:
    """A host's agent started and was sent its launch message."""

    host: str
    handle: AgentHandle


@dataclass(frozen=True)
class AgentDown:
    """A host's agent could not be started (unreachable, refused host key, no python, ...)."""

    host: str
    error: str
    at: float


QueueItem = AgentEvent | Interrupt | AgentUp | AgentDown
Emit = Callable[..., None]


@dataclass
class TaskRuntime:
    plan: TaskPlan
    state: str = "pending"  # pending, running, succeeded, failed, stopped
    pid: int | None = None
    first_step: int | None = None
    step: int | None = None
    last_progress_event: float = 0.0
    restore_failed: str | None = None


class AttemptRunner:
    def __init__(self, launch_plan: LaunchPlan, *, backend: Backend,
                 inbox: queue.SimpleQueue[QueueItem], run_dir: RunDir, console: Console,
                 emit: Emit, machine: JobStateMachine, health: HealthSpec,
                 bad_checkpoints: set[str], fault: Fault | None = None) -> None:
        self.plan = launch_plan
        self.backend = backend
        self.inbox = inbox
        self.run_dir = run_dir
        self.console = console
        self._emit = emit
        self.machine = machine
        self.bad_checkpoints = bad_checkpoints
        self.fault = fault
        self.fault_injected = False
        self.tasks = {str(t.task): TaskRuntime(t) for t in launch_plan.tasks}
        self.logs = TaskLogs(run_dir, launch_plan.attempt)
        self.handles: dict[str, AgentHandle] = {}
        self.open_agents: set[str] = set()  # started, output not yet ended
        self.starting: set[str] = set()  # start under way
        self.closed_agents: set[str] = set()
        self.failures: list[TaskFailure] = []
        self.stopping_since: float | None = None
        self.terminate_at: float | None = None  # graceful stop: TERM only after this
        self.interrupt: Interrupt | None = None
        self.started_at = time.time()
        self.first_progress_at: float | None = None
        self.health = HealthMonitor(health, self.started_at)
        self.next_ping = self.started_at

    def emit(self, event: str, **fields: Any) -> None:
        fields.setdefault("attempt", self.plan.attempt)
        self._emit(event, **fields)

    # --- the attempt -------------------------------------------------------------------------

    def run(self) -> AttemptResult:
        self.machine.to(JobState.STARTING)
        self.emit("attempt_started",
                  resume_step=None if self.plan.resume is None else self.plan.resume.step,
                  resume_checkpoint=None if self.plan.resume is None
                  else self.plan.resume.checkpoint,
                  ports={str(t.task): t.port for t in self.plan.tasks if t.port is not None})
        try:
            self._start_agents()
            self._loop(lambda: self.stopping_since is None and not self._all_succeeded(),
                       watch_health=True)
            self._shutdown()
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
            first_progress_at=self.first_progress_at,
            interrupt_signal=None if self.interrupt is None else self.interrupt.name)

    def _all_succeeded(self) -> bool:
        return all(t.state == "succeeded" for t in self.tasks.values())

    def _running(self) -> bool:
        return any(t.state in ("pending", "running") for t in self.tasks.values())

    # --- start -------------------------------------------------------------------------------

    def _start_agents(self) -> None:
        """Start every host's agent at once, each from its own thread (an SSH connection can take
        seconds): the loop keeps running meanwhile, so hosts already up are pinged and watched,
        and each start's outcome arrives on the queue as :class:`AgentUp` / :class:`AgentDown`."""

        def start(host: HostPlan) -> None:
            try:
                handle = self.backend.start(
                    host, self.plan.launch_message(host), self.inbox.put,
                    self.run_dir.agent_log(self.plan.attempt, host.name))
            except Exception as exc:  # any failure to start is that host's failure
                why = str(exc) if isinstance(exc, AgentStartError) \
                    else f"{host.name}: {type(exc).__name__}: {exc}"
                self.inbox.put(AgentDown(host.name, why, time.time()))
                return
            self.inbox.put(AgentUp(host.name, handle))

        for host in self.plan.hosts:
            self.starting.add(host.name)
            threading.Thread(target=start, args=(host,), name=f"start-{host.name}",
                             daemon=True).start()

    def _on_agent_up(self, item: AgentUp) -> None:
        self.starting.discard(item.host)
        self.handles[item.host] = item.handle
        if item.host not in self.closed_agents:
            self.open_agents.add(item.host)
        self.health.host_seen(item.host, time.time())
        if self.stopping_since is not None and self.terminate_at is None:
            item.handle.send(Terminate(grace_period_s=self._grace_s))  # started too late

    def _on_agent_down(self, item: AgentDown) -> None:
        self.starting.discard(item.host)
        for task in self.plan.tasks:
            if task.host == item.host:
                self.tasks[str(task.task)].state = "failed"
                self._record_failure(TaskFailure(
                    task=str(task.task), host=item.host, attempt=self.plan.attempt,
                    kind=FailureKind.LOST_HOST, died_at=item.at, observed_at=item.at,
                    message=item.error))
        self._stop(f"could not start the agent on {item.host}")

    # --- the loop ----------------------------------------------------------------------------

    def _loop(self, keep_going: Callable[[], bool], deadline: float | None = None,
              watch_health: bool = False) -> None:
        while keep_going():
            now = time.time()
            wake = [1.0 if deadline is None else deadline - now]
            if watch_health and (due := self.health.next_deadline()) is not None:
                wake.append(due - now)
            if self.terminate_at is not None:
                wake.append(self.terminate_at - now)
            if now >= self.next_ping:
                self._ping(now)
            wake.append(self.next_ping - now)
            if deadline is not None and wake[0] <= 0:
                return
            with contextlib.suppress(queue.Empty):
                self._dispatch(self.inbox.get(timeout=max(0.0, min(wake))))
            if watch_health and self.stopping_since is None:
                self._check_health()

    def _ping(self, now: float) -> None:
        """Tell every agent we are alive, so a partitioned agent can stop its tasks itself."""
        self.next_ping = now + self.plan.heartbeat_interval_s
        for host in self.open_agents:
            self.handles[host].send(Ping())

    def _dispatch(self, item: QueueItem) -> None:
        if isinstance(item, Interrupt):
            if self.interrupt is None:
                self.interrupt = item
                self.console.warn(f"got {item.name}: stopping every task "
                                  f"(grace {self.plan.grace_period_s:g}s; again to kill now)")
                self._stop(f"tfcluster got {item.name}")
            else:
                self.console.warn(f"got {item.name} again: killing every task now")
                for handle in self.handles.values():
                    handle.send(Terminate(grace_period_s=0.0))
            return
        if isinstance(item, AgentClosed):
            self._on_agent_closed(item)
            return
        if isinstance(item, AgentUp):
            self._on_agent_up(item)
            return
        if isinstance(item, AgentDown):
            self._on_agent_down(item)
            return
        self.health.host_seen(item.host, item.received_at)
        message = item.message
        if isinstance(message, Output):
            self.logs.write(message.task, message.line)
            self.console.task_line(message.task, message.line)
        elif isinstance(message, Progress):
            self._on_progress(message, item.received_at)
        elif isinstance(message, Started):
            self._on_started(item.host, message, item.received_at)
        elif isinstance(message, Exited):
            self._on_exited(item.host, message, item.received_at)
        elif isinstance(message, TaskReport):
            self._on_report(message)
        elif isinstance(message, AgentError):
            self.console.error(f"agent on {item.host}: {message.message}")

    def _on_started(self, host: str, message: Started, received_at: float) -> None:
        runtime = self.tasks[message.task]
        runtime.state, runtime.pid = "running", message.pid
        self.health.task_started(message.task, host, received_at)
        self.emit("task_started", task=message.task, host=host, pid=message.pid,
                  log=str(self.logs.path(message.task)))
        if self.machine.state is JobState.STARTING and all(
                t.state != "pending" for t in self.tasks.values()):
            self.machine.to(JobState.RUNNING)

    def _on_progress(self, message: Progress, received_at: float) -> None:
        runtime = self.tasks[message.task]
        first = runtime.first_step is None
        if first:
            runtime.first_step = message.step
            if self.first_progress_at is None:
                self.first_progress_at = received_at
        runtime.step = message.step
        self.health.progress(message.task, message.step, received_at)
        if first or received_at - runtime.last_progress_event >= PROGRESS_EVENT_INTERVAL_S:
            runtime.last_progress_event = received_at
            self.emit("task_progress", task=message.task, step=message.step,
                      metrics=message.metrics, first=first)
        if first:
            self._check_start_steps(received_at)
        if self.fault is not None and not self.fault_injected and self.stopping_since is None \
                and self.fault.due(self.plan.attempt, message.task, message.step):
            self._inject(self.fault, message.step)

    def _inject(self, fault: Fault, step: int) -> None:
        host = self.tasks[fault.task].plan.host
        handle = self.handles.get(host)
        if handle is None:
            return
        self.fault_injected = True
        handle.send(SignalTasks(signal=fault.signal.name, task=fault.task))
        self.emit("fault_injected", task=fault.task, host=host, signal=fault.signal.name,
                  step=step)
        self.console.warn(f"drill: sent {fault.signal.name} to {fault.task} at step {step}")

    def _check_start_steps(self, now: float) -> None:
        """MWMS tasks run in lock-step: if they begin at different steps, they restored different
        checkpoints, and the collectives will fail ("Collective instance ... expected ...")."""
        training = [t for t in self.tasks.values() if t.plan.task.type in TRAINING_TYPES]
        firsts = {str(t.plan.task): t.first_step for t in training}
        if None in firsts.values() or len(set(firsts.values())) <= 1:
            return
        listing = ", ".join(f"{task} at step {step}" for task, step in sorted(firsts.items()))
        self._record_failure(TaskFailure(
            task=min(firsts, key=lambda t: firsts[t] or 0), host="-",
            attempt=self.plan.attempt, kind=FailureKind.STEP_MISMATCH, died_at=now,
            observed_at=now,
            message=f"the tasks started from different steps ({listing}): each must restore the "
                    "same checkpoint (TFCLUSTER_RESUME_CHECKPOINT, or a checkpoint directory "
                    "every task can read)"))
        self._stop("tasks started from different steps")

    def _on_report(self, message: TaskReport) -> None:
        if message.kind == "restore_failed":
            checkpoint = str(message.data.get("checkpoint", ""))
            self.tasks[message.task].restore_failed = checkpoint
            self.bad_checkpoints.add(checkpoint)
            self.console.warn(f"{message.task} could not restore {checkpoint}: "
                              f"{message.data.get('error', '')}")
        elif message.kind == "preempted":
            self.emit("task_preempted", task=message.task, step=message.data.get("step"))
        elif message.kind != "ready":
            self.console.say(f"{message.task} reported {message.kind}: {message.data}")

    def _on_exited(self, host: str, message: Exited, received_at: float) -> None:
        runtime = self.tasks[message.task]
        self.health.task_done(message.task)
        if message.exit_code == 0:
            runtime.state = "succeeded"
            self.emit("task_exited", task=message.task, host=host, exit_code=0)
            return
        if self.stopping_since is not None and message.ts >= self.stopping_since:
            runtime.state = "stopped"
            self.emit("task_exited", task=message.task, host=host,
                      exit_code=message.exit_code, signal=message.signal, stopped=True)
            return
        runtime.state = "failed"
        kind, note = self._classify(runtime, message)
        self._record_failure(TaskFailure(
            task=message.task, host=host, attempt=self.plan.attempt, kind=kind,
            died_at=message.ts, observed_at=received_at, exit_code=message.exit_code,
            signal=message.signal, traceback=message.traceback,
            stderr_tail=tuple(message.stderr_tail), message=note))
        self._stop(f"{message.task} failed", graceful=kind is FailureKind.PREEMPTED)

    def _classify(self, runtime: TaskRuntime, message: Exited) -> tuple[FailureKind, str | None]:
        if message.error:
            return FailureKind.SPAWN_FAILED, message.error
        if runtime.restore_failed:
            return FailureKind.RESTORE_FAILED, f"could not restore {runtime.restore_failed}"
        if message.exit_code == PREEMPTION_EXIT_CODE:
            return FailureKind.PREEMPTED, None
        if runtime.step is None and is_port_conflict(message.stderr_tail, message.traceback):
            return FailureKind.PORT_CONFLICT, None
        return (FailureKind.SIGNALLED if message.signal else FailureKind.EXITED), None

    def _on_agent_closed(self, item: AgentClosed) -> None:
        self.open_agents.discard(item.host)
        self.closed_agents.add(item.host)
        self.health.host_gone(item.host)
        if self.stopping_since is None:
            self._lose_host(item.host, item.at, f"lost contact with its agent: {item.reason}")

    def _lose_host(self, host: str, since: float, why: str) -> None:
        self.health.host_gone(host)
        lost = [t for t in self.tasks.values()
                if t.plan.host == host and t.state in ("pending", "running")]
        for runtime in lost:
            runtime.state = "failed"
            self._record_failure(TaskFailure(
                task=str(runtime.plan.task), host=host, attempt=self.plan.attempt,
                kind=FailureKind.LOST_HOST, died_at=since, observed_at=time.time(), message=why))
        if lost:
            self._stop(f"lost host {host}")

    def _check_health(self) -> None:
        issues = self.health.check(time.time())
        if not issues:
            return
        for issue in issues:
            if issue.kind is FailureKind.LOST_HOST:
                self._lose_host(issue.host, issue.since, issue.message)
            else:
                self._record_hang(issue)
        if self.stopping_since is None:
            self._dump_stacks()
            self._stop("unhealthy: " + "; ".join(i.message for i in issues))

    def _record_hang(self, issue: HealthIssue) -> None:
        if issue.task is None:
            return
        self.tasks[issue.task].state = "failed"
        self.health.task_done(issue.task)
        self._record_failure(TaskFailure(
            task=issue.task, host=issue.host, attempt=self.plan.attempt, kind=issue.kind,
            died_at=issue.since, observed_at=time.time(), message=issue.message))

    def _dump_stacks(self) -> None:
        """Ask every task for its Python stacks (into its log) before the attempt is killed."""
        self.console.warn("asking every task for its Python stacks (see the task logs)")
        for handle in self.handles.values():
            handle.send(DumpStacks())
        self._loop(lambda: True, deadline=time.time() + STACK_DUMP_WAIT_S)

    def _record_failure(self, failure: TaskFailure) -> None:
        self.failures.append(failure)
        self.emit("task_failed", **failure.to_dict())

    # --- stop --------------------------------------------------------------------------------

    def _stop(self, reason: str, graceful: bool = False) -> None:
        """Begin tearing down every task of every host at the same moment. ``graceful`` (a
        preemption) first gives the other tasks the grace period to save and exit themselves."""
        if self.stopping_since is not None:
            return
        self.stopping_since = time.time()
        self.machine.to(JobState.STOPPING)
        self.emit("job_stopping", reason=reason)
        if graceful:
            self.terminate_at = self.stopping_since + self.plan.grace_period_s
        else:
            self._terminate_all()

    @property
    def _grace_s(self) -> float:
        """TERM -> KILL: the full grace when tasks may still save (interrupt, preemption), the
        short failure grace for the survivors of a crash."""
        if self.interrupt is not None or self.terminate_at is not None \
                or self.plan.failure_grace_period_s is None:
            return self.plan.grace_period_s
        return self.plan.failure_grace_period_s

    def _terminate_all(self) -> None:
        grace = self._grace_s
        self.terminate_at = None
        for handle in self.handles.values():
            handle.send(Terminate(grace_period_s=grace))

    def _shutdown(self) -> None:
        """Let the tasks go (EOF to every agent), collect what they still report, and verify that
        nothing of the attempt is left."""
        if self.terminate_at is not None:  # graceful: wait for the others to exit on their own
            self._loop(self._running, deadline=self.terminate_at)
            self._terminate_all()
        # every start still under way must end first: no agent may be left without its EOF
        self._loop(lambda: bool(self.starting), deadline=time.time() + START_WAIT_S)
        if self.stopping_since is not None:  # commands (a second Ctrl-C) still reach the agents
            self._loop(lambda: self._running() and bool(self.open_agents),
                       deadline=time.time() + self.plan.grace_period_s + TEARDOWN_MARGIN_S)
        for handle in self.handles.values():
            handle.close_input()
        self._loop(lambda: bool(self.open_agents), deadline=time.time() + TEARDOWN_MARGIN_S)
        for host, handle in self.handles.items():
            leftovers = handle.close(timeout_s=2.0)
            if leftovers:
                self.console.warn(f"{host}: killed {len(leftovers)} process(es) left behind "
                                  f"by the attempt: {leftovers}")
        while True:  # the agents' last words (e.g. AgentClosed) after close()
            try:
                self._dispatch(self.inbox.get_nowait())
            except queue.Empty:
                break
        if self.failures:
            self.console.error(format_report(self.failures, self.plan.job))
