"""One attempt of a job: start every host's agent, react to what they report, notice failures and
unhealthy tasks, and tear the whole attempt down (verified) when one task fails.

Everything arrives on one inbox (agent reader threads, agent starts, signal handlers), and this
class alone decides, in the order things happened. It sleeps on that inbox until the next health
deadline, so a failure is handled the moment its message arrives, with no polling. What it learned
comes back as an :class:`~launcher.run.outcome.AttemptResult`; the job's state machine belongs to
the coordinator, which this class only tells when the attempt changes phase.
"""

from __future__ import annotations

import contextlib
import queue
import signal
from collections.abc import Callable

from launcher.backends.base import AgentClosed, AgentMessage
from launcher.job.agents import (
    AGENT_EXIT_WAIT_S,
    START_WAIT_S,
    TEARDOWN_MARGIN_S,
    AgentDown,
    AgentSet,
    AgentUp,
)
from launcher.job.failure_log import FailureLog
from launcher.job.health import HealthIssue, HealthMonitor
from launcher.job.hooks import AttemptHooks, HookList
from launcher.job.inbox import Clock, Inbox, InboxItem, Interrupt, Resize
from launcher.job.stall import StallWatch
from launcher.job.state import JobState
from launcher.job.stop_step import StopStep, lock_step_hosts
from launcher.job.task_health import TaskHealthWatch
from launcher.job.task_reports import handle_report
from launcher.job.tasks import TaskState, TaskTable
from launcher.output.console import Console
from launcher.output.task_logs import TaskLogs
from launcher.plan.planner import LaunchPlan
from launcher.plan.secrets import Redactor
from launcher.run.directory import RunDir
from launcher.run.events import AttemptStarted, Event, JobStopping, TaskExited, TaskStarted
from launcher.run.failures import FailureKind, format_report
from launcher.run.outcome import AttemptResult, AttemptStatus
from launcher.spec.health import HealthSpec
from worker.wire.protocol import (
    AgentError,
    DumpStacks,
    Exited,
    Heartbeat,
    Output,
    Progress,
    SignalTasks,
    StacksDumped,
    Started,
    TaskReport,
    Terminate,
    Terminated,
)

Emit = Callable[[Event], None]

#: task_progress events are written at most this often per task (every step still counts).
PROGRESS_EVENT_INTERVAL_S = 1.0
#: The longest wait for the agents to say their tasks' stack dumps are written (each says so as
#: soon as they are, :mod:`worker.agent.stack_dumps`) before a hung attempt is killed.
STACK_DUMP_WAIT_S = 5.0
#: Longest sleep of the loop when nothing is due (it wakes at once for any message).
IDLE_WAKE_S = 1.0


class AttemptRunner:
    def __init__(self, launch_plan: LaunchPlan, *, agents: AgentSet, inbox: Inbox,
                 run_dir: RunDir, console: Console, emit: Emit,
                 phase: Callable[[JobState], None], health: HealthSpec,
                 hooks: AttemptHooks | None = None, clock: Clock,
                 watch: TaskHealthWatch) -> None:
        self.plan, self.agents, self.inbox, self.run_dir = launch_plan, agents, inbox, run_dir
        self.console, self.emit, self.warn = console, emit, console.warn
        self._phase, self.hooks = phase, hooks or HookList()
        self.watch = watch  # per-task figures, stragglers, memory, metrics
        self.clock, self.stall = clock, StallWatch(IDLE_WAKE_S)  # stall: we were stopped (Ctrl-Z)
        self.tasks = TaskTable(launch_plan.tasks)
        #: Masks secrets (the job's own secret values, credential patterns) in all it records.
        self.redact = Redactor.for_envs(task.env for task in launch_plan.tasks)
        self.logs = TaskLogs(run_dir, launch_plan.attempt, on_error=console.warn)
        self.failures = FailureLog(launch_plan.attempt, self.tasks, emit=emit, clock=clock,
                                   redact=self.redact,
                                   preemption_codes=launch_plan.preemption_exit_codes)
        self.bad_checkpoints: set[str] = set()
        self.stopping_since: float | None = None
        self.terminate_at: float | None = None  # graceful stop: TERM only after this
        self.interrupt: Interrupt | None = None
        self.resize: Resize | None = None  # stopped to restart at another size
        self.started_at = clock()
        self.first_progress_at: float | None = None
        self.health = HealthMonitor(health, self.started_at)
        self.next_ping = self.started_at
        self.spares_rss: dict[str, int] = {}  # memory of each host's warm spares, bytes
        self.dumping: set[str] = set()  # hosts whose tasks' stack dumps are not written yet
        self.stops = StopStep(lock_step_hosts(launch_plan.tasks), agents.send, console.say)
        agents.route_output(self._on_output)

    @property
    def attempt(self) -> int:
        return self.plan.attempt

    def run(self) -> AttemptResult:
        self._phase(JobState.STARTING)
        resume = self.plan.resume
        self.emit(AttemptStarted(self.attempt, resume_step=None if resume is None else resume.step,
                                 resume_checkpoint=None if resume is None else resume.checkpoint,
                                 ports=self.plan.ports))
        try:  # the agents outlive the attempt: the coordinator ends them with the job
            self.agents.start_all(self.plan, self.run_dir.agent_log)
            self._loop(lambda: self.stopping_since is None and not self.tasks.all_succeeded,
                       watch_health=True)
            self._shutdown()
        finally:
            self.logs.close()
        return self._result()

    def _result(self) -> AttemptResult:
        status = (AttemptStatus.INTERRUPTED if self.interrupt is not None
                  else AttemptStatus.FAILED if self.failures
                  else AttemptStatus.RESIZED if self.resize is not None
                  else AttemptStatus.FAILED if not self.tasks.all_succeeded
                  else AttemptStatus.SUCCEEDED)
        return AttemptResult(
            attempt=self.plan.attempt, status=status, started_at=self.started_at,
            ended_at=self.clock(), failures=tuple(self.failures.failures), ports=self.plan.ports,
            resume_step=None if self.plan.resume is None else self.plan.resume.step,
            max_step=self.tasks.max_step(), reached_step=self.tasks.reached_step(),
            first_progress_at=self.first_progress_at,
            interrupt_signal=None if self.interrupt is None else self.interrupt.name,
            bad_checkpoints=frozenset(self.bad_checkpoints),
            spares_rss_bytes=sum(self.spares_rss.values()),
            resized=None if self.resize is None else self.resize.reason,
            placement={str(t.task): t.host for t in self.plan.tasks}, workers=self.plan.workers)

    # --- the loop ----------------------------------------------------------------------------

    def _loop(self, keep_going: Callable[[], bool], deadline: float | None = None,
              watch_health: bool = False) -> None:
        while keep_going():
            now = self.clock()
            wake = [IDLE_WAKE_S if deadline is None else deadline - now]
            if watch_health and (due := self._next_deadline()) is not None:
                wake.append(due - now)
            if self.terminate_at is not None:
                wake.append(self.terminate_at - now)
            if watch_health and self.stopping_since is None:
                wake.append(self.hooks.on_tick(self, now) - now)  # e.g. a drill's after= timer
            if now >= self.next_ping:
                self.next_ping = now + self.plan.heartbeat_interval_s
                self.agents.ping()
            wake.append(self.next_ping - now)
            if deadline is not None and wake[0] <= 0:
                return
            with contextlib.suppress(queue.Empty):
                self._dispatch(self.inbox.get(timeout=max(0.0, min(wake))))
            if watch_health and self.stopping_since is None:
                self._check_health()

    def _dispatch(self, item: InboxItem) -> None:
        if isinstance(item, Interrupt | Resize):
            self._on_interrupt(item)
        elif isinstance(item, AgentClosed):
            self._on_agent_closed(item)
        elif isinstance(item, AgentUp):
            self._on_agent_up(item)
        elif isinstance(item, AgentDown):
            self._on_agent_down(item)
        elif isinstance(item, AgentMessage):
            self.health.host_seen(item.host, item.received_at)
            self.watch.observe(self.attempt, item.host, item.message, item.received_at)
            for task in self.watch.over_memory_limit():
                self.signal_task(task, signal.SIGKILL)
            self._on_message(item.host, item.message, item.received_at)

    def _on_output(self, _host: str, message: Output) -> None:  # from a reader thread
        line = self.redact(message.line)
        self.console.task_line(message.task, line)
        self.logs.write(message.task, line)

    def _on_message(self, host: str, message: object, received_at: float) -> None:
        if isinstance(message, Progress):
            self._on_progress(message, received_at)
        elif isinstance(message, Started):
            self._on_started(host, message, received_at)
        elif isinstance(message, Exited):
            self._on_exited(host, message, received_at)
        elif isinstance(message, TaskReport):
            self._on_report(message)
        elif isinstance(message, Heartbeat) and message.spares_rss_bytes:
            self.spares_rss[host] = message.spares_rss_bytes
        elif isinstance(message, Terminated):
            self.agents.confirmed(host)
        elif isinstance(message, StacksDumped):
            self.dumping.discard(host)
            for task in message.unfinished:
                self.warn(f"{task} did not finish writing its stacks (see its log)")
        elif isinstance(message, AgentError):
            self.console.error(self.redact(f"agent on {host}: {message.message}"))

    def _on_interrupt(self, item: Interrupt | Resize) -> None:
        if isinstance(item, Resize):  # every task saves (SIGTERM) and the job restarts resized
            if self.stopping_since is None:
                self.resize = item
                self.console.warn(f"{item.reason}: stopping every task, which may save first "
                                  f"(grace {self.plan.grace_period_s:g}s)")
                self._stop(item.reason)
        elif self.interrupt is None:
            self.interrupt = item
            self.console.warn(f"got {item.name}: stopping every task "
                              f"(grace {self.plan.grace_period_s:g}s; again to kill now)")
            self._stop(f"tfcluster got {item.name}")
        else:
            self.console.warn(f"got {item.name} again: killing every task now")
            self.agents.terminate_all(0.0)

    # --- agents ------------------------------------------------------------------------------

    def _on_agent_up(self, item: AgentUp) -> None:
        self.agents.up(item)
        self.health.host_seen(item.host, self.clock())
        if self.stopping_since is not None and self.terminate_at is None:
            item.handle.send(Terminate(grace_period_s=self._grace_s))  # started too late

    def _on_agent_down(self, item: AgentDown) -> None:
        self.agents.down(item)
        for runtime in self.tasks.on(item.host):
            self.failures.write_off(runtime.name, item.host, FailureKind.LOST_HOST, item.at,
                                    item.error)
        self._stop(f"could not start the agent on {item.host}")

    def _on_agent_closed(self, item: AgentClosed) -> None:
        self.agents.closed(item.host)
        self.health.host_gone(item.host)
        if self.stopping_since is None:
            self._lose_host(item.host, item.at, f"lost contact with its agent: {item.reason}")

    def _lose_host(self, host: str, since: float, why: str) -> None:
        self.health.host_gone(host)
        self.agents.lost(host)  # nothing more is awaited from it
        lost = self.tasks.active_on(host)
        for runtime in lost:
            self.failures.write_off(runtime.name, host, FailureKind.LOST_HOST, since, why)
        if lost:
            self._stop(f"lost host {host}")

    # --- tasks -------------------------------------------------------------------------------

    def _on_started(self, host: str, message: Started, received_at: float) -> None:
        runtime = self.tasks[message.task]
        if runtime.state is TaskState.PENDING:
            runtime.to(TaskState.RUNNING)
        runtime.pid = message.pid
        self.health.task_started(message.task, host, received_at)
        self.emit(TaskStarted(self.attempt, task=message.task, host=host, pid=message.pid,
                              log=str(self.logs.path(message.task)), warm=message.warm,
                              cold_reason=message.cold_reason))
        if self.stopping_since is None and self.tasks.none_pending:
            self._phase(JobState.RUNNING)

    def _on_progress(self, message: Progress, received_at: float) -> None:
        first, event = self.tasks[message.task].progress(self.attempt, message.step, received_at,
                                                         PROGRESS_EVENT_INTERVAL_S)
        if self.first_progress_at is None:
            self.first_progress_at = received_at
        self.health.progress(message.task, message.step, received_at)
        if event is not None:  # the first, at most one a second, and the last (at its exit)
            self.emit(event)
        # lock-step tasks begun at different steps restored different checkpoints: collectives fail
        if first and (firsts := self.tasks.start_steps()) is not None:
            self.failures.start_steps_differ(firsts, received_at)
            self._stop("tasks started from different steps")
        if self.stopping_since is None:
            self.hooks.on_progress(self, message.task, message.step)

    def signal_task(self, task: str, sig: signal.Signals) -> str | None:
        host = self.tasks[task].plan.host
        return host if self.agents.send(host, SignalTasks(signal=sig.name, task=task)) else None

    def _on_report(self, message: TaskReport) -> None:
        handle_report(message, self.attempt, tasks=self.tasks, bad=self.bad_checkpoints,
                      emit=self.emit, console=self.console, redact=self.redact, stops=self.stops)

    def _on_exited(self, host: str, message: Exited, received_at: float) -> None:
        self.hooks.on_exited(self, message.task)  # e.g. a drill corrupting the dead chief's latest
        runtime = self.tasks[message.task]
        runtime.flush_progress(self.attempt, self.emit)  # its last step, before its exit
        active = runtime.state.active  # not yet written off (hung, or its host was lost)
        self.health.task_done(message.task)
        if message.exit_code == 0:
            self.emit(TaskExited(self.attempt, task=message.task, host=host, exit_code=0))
            if active:
                runtime.to(TaskState.SUCCEEDED)
            return
        if self.stopping_since is not None and message.ts >= self.stopping_since:
            self.emit(TaskExited(self.attempt, task=message.task, host=host,
                                 exit_code=message.exit_code, signal=message.signal,
                                 stopped=True))
            if active:
                runtime.to(TaskState.STOPPED)
            return
        if active:
            self._task_failed(host, message, received_at)

    def _task_failed(self, host: str, message: Exited, received_at: float) -> None:
        """A running task failed: the attempt stops (all tasks of a lock-step job go together)."""
        kind = self.failures.exited(host, message, received_at, self.watch.memory_note(message))
        self._stop(f"{message.task} failed", graceful=kind is FailureKind.PREEMPTED)

    # --- health ------------------------------------------------------------------------------

    def _check_health(self) -> None:
        if not (issues := self.health.check(self.clock(), self.stall.gap())):
            return
        for issue in issues:
            if issue.kind is FailureKind.LOST_HOST:
                self._lose_host(issue.host, issue.since, issue.message)
            else:
                self._record_hang(issue)
        if self.stopping_since is None:
            self._dump_stacks()
            self._stop("unhealthy: " + "; ".join(i.message for i in issues))

    def _next_deadline(self) -> float | None:
        """When the next health deadline (or other timer of the attempt) is due."""
        return self.health.next_deadline()

    def _record_hang(self, issue: HealthIssue) -> None:
        if issue.task is not None:
            self.health.task_done(issue.task)
            self.failures.write_off(issue.task, issue.host, issue.kind, issue.since, issue.message)

    def _dump_stacks(self) -> None:
        """Ask every task for its Python stacks (into its log) and wait until they are written."""
        self.console.warn("asking every task for its Python stacks (see the task logs)")
        self.dumping = self.agents.send_all(DumpStacks())
        self._loop(lambda: bool(self.dumping), deadline=self.clock() + STACK_DUMP_WAIT_S)

    # --- stop --------------------------------------------------------------------------------

    def _stop(self, reason: str, graceful: bool = False) -> None:
        """Begin tearing down every task of every host at the same moment. ``graceful`` (a
        preemption) first gives the other tasks the grace period to save and exit themselves."""
        if self.stopping_since is not None:
            return
        self.stopping_since = self.clock()
        self._phase(JobState.STOPPING)
        self.emit(JobStopping(self.attempt, reason))
        if graceful:
            self.terminate_at = self.stopping_since + self.plan.grace_period_s
        else:
            self._terminate_all()

    @property
    def _grace_s(self) -> float:
        """TERM -> KILL: the full grace when tasks may still save (interrupt, preemption), the
        short failure grace for the survivors of a crash."""
        if self.interrupt is not None or self.resize is not None \
                or self.terminate_at is not None or self.plan.failure_grace_period_s is None:
            return self.plan.grace_period_s
        return self.plan.failure_grace_period_s

    def _terminate_all(self) -> None:
        grace, self.terminate_at = self._grace_s, None
        self.agents.terminate_all(grace)

    def _shutdown(self) -> None:
        """End every task (a terminate to every agent), collect what they still report, and have
        each agent confirm that nothing of the attempt is left; an agent that was lost or does
        not confirm is ended here (the next attempt starts a new one on its host)."""
        if self.terminate_at is not None:  # graceful: wait for the others to exit on their own
            self._loop(lambda: self.tasks.any_active, deadline=self.terminate_at)
            self._terminate_all()
        # every start still under way must end first: no agent may be left without its EOF
        self._loop(lambda: self.agents.starting, deadline=self.clock() + START_WAIT_S)
        if self.stopping_since is not None:  # commands (a second Ctrl-C) still reach the agents
            self._loop(lambda: self.tasks.any_active and self.agents.any_open,
                       deadline=self.clock() + self.plan.grace_period_s + TEARDOWN_MARGIN_S)
        self.agents.terminate_all(self._grace_s)  # also after success: leftovers of the tasks
        self._loop(lambda: bool(self.agents.unconfirmed),
                   deadline=self.clock() + self._grace_s + TEARDOWN_MARGIN_S)
        if stuck := self.agents.unconfirmed:
            self.console.warn(f"no confirmation that the tasks are gone from {sorted(stuck)}; "
                              "ending those agents")
        for host, pids in {**self.agents.drop(stuck, AGENT_EXIT_WAIT_S),
                           **self.agents.drop_lost(AGENT_EXIT_WAIT_S)}.items():
            self.console.warn(f"{host}: killed {len(pids)} process(es) left behind "
                              f"by the attempt: {pids}")
        with contextlib.suppress(queue.Empty):  # the agents' last words (e.g. AgentClosed)
            while True:
                self._dispatch(self.inbox.get_nowait())
        self.tasks.flush_progress(self.attempt, self.emit)  # tasks written off (hung, lost)
        if self.failures:
            self.console.failure_report(format_report(self.failures.failures, self.plan.job))
