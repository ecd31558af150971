"""One attempt of a ParameterServerStrategy job: tasks restarted one at a time, the job done when
the chief exits 0.

The whole-attempt machinery (agents, inbox, health, teardown) is :class:`AttemptRunner`'s; this
class only says its hard cases:

- a task that fails goes to :func:`~launcher.job.task_policy.decide_task`: a worker is started
  again alone on its host and port (``start_task`` to its agent, after the backoff) while the
  chief trains on; a ps is started again with the chief, which is stopped first
  (``stop_task``) and resumes from its latest checkpoint once the ps answers on its port (a
  ``ClusterCoordinator`` that cannot reach a ps dies of it, which would spend a second restart
  on one failure); a worker in a crash loop is left out;
  when the policy gives up, the attempt stops and the job fails with its reason;
- the chief's exit 0 ends the job: every server and the evaluator are stopped (TERM, the full
  grace period) and the attempt succeeds;
- workers and parameter servers report no steps: they have no start-up or hang deadline (a
  server whose port stops answering is caught by :mod:`launcher.job.server_watch`).

A lost host, a hung chief or an agent that cannot start still stop the whole attempt, and the job
policy restarts every task (:mod:`launcher.job.policy`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, MutableMapping
from dataclasses import dataclass
from typing import Any

from launcher.job.attempt import AttemptRunner
from launcher.job.failure_rules import judge
from launcher.job.inbox import InboxItem
from launcher.job.server_watch import ServerAnswered, ServerSilent, ServerWatch
from launcher.job.task_policy import TaskAction, TaskDecision, TaskTally, decide_task, quick
from launcher.job.tasks import TaskState
from launcher.plan.planner import ResumePoint, TaskPlan
from launcher.run.events import TaskExited
from launcher.run.failures import FailureKind, TaskFailure
from launcher.run.outcome import AppliedRule, AttemptResult, AttemptStatus
from launcher.run.task_events import ChiefFinished, TaskLeftOut, TaskRestarted
from launcher.spec.health import RestartSpec
from worker.wire import env
from worker.wire.protocol import Exited, Started, StartTask, StopTask
from worker.wire.tfconfig import CHIEF, PS, WORKER, TaskId

#: How long a chief started again with a ps waits for the ps to answer on its port; then it is
#: started anyway (and what it makes of a ps it cannot reach decides what comes next).
SERVER_WAIT_S = 120.0


@dataclass
class SingleRestarts:
    """What a parameter_server job's attempts share: the spec's ``restart`` section, every
    task's restarts so far (owned by the coordinator, updated by each attempt), the training
    restarts spent before this attempt, and how to find the chief's latest checkpoint."""

    restart: RestartSpec
    latest: Callable[[], ResumePoint | None]
    tallies: MutableMapping[TaskId, TaskTally] = dataclasses.field(default_factory=dict)
    used_before: int = 0

    def summary(self) -> dict[str, Any]:
        """``summary.json``'s ``task_restarts``: per task restarted alone (or left out), how
        often, and the last reason."""
        return {"task_restarts": {
            str(task): {"restarts": tally.restarts, "last_restart_reason": tally.last_reason,
                        "left_out": tally.left_out}
            for task, tally in sorted(self.tallies.items())}}


class PsAttemptRunner(AttemptRunner):
    def __init__(self, *args: Any, single: SingleRestarts, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.single = single
        self.due: dict[str, float] = {}  # task -> when it is started again
        self.stopping_for_restart: set[str] = set()  # started again once they have exited
        self.since: dict[str, float] = {}  # task -> when it (last) started
        self.training_restarts = 0
        self.restarted: dict[str, int] = {}
        self.recovered: list[TaskFailure] = []
        self.left_out: list[str] = []
        self.gave_up: str | None = None
        self.finished = False
        self.alive: set[str] = set()  # tasks whose process runs (started, not yet exited)
        self.awaits: dict[str, tuple[set[str], float]] = {}  # task -> (servers it waits for,
        #                                                      when it starts anyway)
        self.servers = ServerWatch(self.inbox.put, self.clock, self.plan.heartbeat_interval_s)

    @staticmethod
    def _server(task: str) -> bool:
        return TaskId.parse(task).type in (WORKER, PS)

    # --- hooks of the attempt ----------------------------------------------------------------

    def run(self) -> AttemptResult:
        try:
            return super().run()
        finally:
            self.servers.close()

    def _dispatch(self, item: InboxItem) -> None:
        if isinstance(item, ServerSilent):
            self._server_silent(item)
        elif isinstance(item, ServerAnswered):
            if item.at >= self.since.get(item.task, item.at):  # this start's first answer
                for servers, _ in self.awaits.values():
                    servers.discard(item.task)
        else:
            super()._dispatch(item)

    def _on_started(self, host: str, message: Started, received_at: float) -> None:
        super()._on_started(host, message, received_at)
        self.since[message.task] = received_at
        self.alive.add(message.task)
        if self._server(message.task):
            self.health.task_done(message.task)  # no steps, so no start-up or hang deadline
            plan = self.tasks[message.task].plan
            if plan.port is not None and self.stopping_since is None:
                self.servers.watch(message.task, host, self.plan.host_of(plan.task).address,
                                   plan.port)

    def _server_silent(self, item: ServerSilent) -> None:
        """A server's port went dead while its process runs: it is killed and counts as
        failed (the policy decides what is started again)."""
        runtime = self.tasks[item.task]
        if self.stopping_since is not None or not runtime.state.active \
                or item.since < self.since.get(item.task, item.since):
            return  # stopping, or about a life of the task that has ended
        self.agents.send(item.host, StopTask(task=item.task, grace_period_s=0.0))
        self.failures.write_off(item.task, item.host, FailureKind.SERVER_SILENT, item.since,
                                item.why)
        self._decide(TaskId.parse(item.task), item.host, FailureKind.SERVER_SILENT, item.since)

    def _on_exited(self, host: str, message: Exited, received_at: float) -> None:
        self.alive.discard(message.task)
        self.servers.forget(message.task)
        if message.task in self.stopping_for_restart and self.stopping_since is None:
            self._stopped_for_restart(host, message, received_at)
            return
        super()._on_exited(host, message, received_at)
        if message.exit_code == 0 and message.task == str(TaskId(CHIEF, 0)) \
                and self.stopping_since is None:
            self.finished = True
            self.due.clear()
            others = [t.name for t in self.tasks if t.state.active]
            self.emit(ChiefFinished(self.attempt, stopping=others))
            self._stop("the chief exited 0: stopping the servers"
                       + (" and the evaluator" if any("evaluator" in t for t in others) else ""))

    def _stopped_for_restart(self, host: str, message: Exited, received_at: float) -> None:
        """A task stopped to be started again (the chief of a ps that failed) has exited."""
        self.stopping_for_restart.discard(message.task)
        self.health.task_done(message.task)
        self.tasks[message.task].to(TaskState.STOPPED)
        self.emit(TaskExited(self.attempt, task=message.task, host=host,
                             exit_code=message.exit_code, signal=message.signal, stopped=True))
        self.due[message.task] = max([received_at, *self.due.values()])  # after the ps

    def _task_failed(self, host: str, message: Exited, received_at: float) -> None:
        kind = self.failures.exited(host, message, received_at, self.watch.memory_note(message))
        self._decide(TaskId.parse(message.task), host, kind, received_at)

    def _decide(self, task: TaskId, host: str, kind: FailureKind, at: float) -> None:
        decision = decide_task(task, at - self.since.get(str(task), at),
                               preempted=kind is FailureKind.PREEMPTED,
                               tallies=self.single.tallies, workers=self._workers(),
                               restart=self.single.restart,
                               job_restarts_used=self.single.used_before + self.training_restarts,
                               rule=self._rule(task))
        self._carry_out(task, host, decision, at)

    def _rule(self, task: TaskId) -> AppliedRule | None:
        """The failure rule that matches ``task``'s failure (the one just recorded); before any
        step means in its first start of the job's first attempt, with no step reported."""
        first = self.attempt == 0 and task not in self.single.tallies \
            and self.tasks[str(task)].step is None
        return judge(self.failures.failures[-1], self.single.restart.rules, before_any_step=first)

    def _carry_out(self, task: TaskId, host: str, decision: TaskDecision, now: float) -> None:
        name = str(task)
        tally = self.single.tallies.get(task, TaskTally())
        fast = quick(now - self.since.get(name, now), self.single.restart)
        if decision.action is TaskAction.FAIL:
            self.gave_up = f"{name} failed: {decision.reason}"
            self._stop(f"{name} failed")
            return
        failure = self.failures.recovered()  # not the attempt's failure: recovered from
        self.recovered.append(failure)
        cause = failure.how()
        if decision.action is TaskAction.LEAVE_OUT:
            self.single.tallies[task] = dataclasses.replace(
                tally, left_out=True, last_reason=f"{cause}; {decision.reason}")
            self.left_out.append(name)
            self.emit(TaskLeftOut(self.attempt, task=name, host=host, cause=cause,
                                  reason=decision.reason))
            self.console.warn(f"{name} left out: {decision.reason}")
            return
        self.single.tallies[task] = dataclasses.replace(
            tally, restarts=tally.restarts + 1, last_reason=f"{cause}; {decision.reason}",
            quick_failures=tally.quick_failures + 1 if fast else 0,
            uncounted=tally.uncounted + int(decision.budget is None))
        self.restarted[name] = self.restarted.get(name, 0) + 1
        if decision.budget == "job":
            self.training_restarts += 1
        together = [str(t) for t in decision.restart if t != task]
        resume = self.single.latest() if CHIEF in (t.type for t in decision.restart) else None
        self.emit(TaskRestarted(self.attempt, task=name, host=host, cause=cause,
                                reason=decision.reason,
                                restarts=self.single.tallies[task].restarts,
                                backoff_s=decision.backoff_s, together=together,
                                resume_step=None if resume is None else resume.step))
        servers = {str(t) for t in decision.restart if t.type == PS}
        chief = "" if CHIEF not in (t.type for t in decision.restart) else \
            "; the chief starts from the beginning (no checkpoint)" if resume is None else \
            f"; the chief resumes from step {resume.step}"
        if chief and servers:
            chief += f" once {', '.join(sorted(servers))} answer{'s' * (len(servers) == 1)}"
            self.awaits.update({str(t): (set(servers), now + SERVER_WAIT_S)
                                for t in decision.restart if t.type == CHIEF})
        self.console.warn(f"{failure.headline()}; {decision.reason}{chief}")
        for other in decision.restart:
            runtime = self.tasks[str(other)]
            if runtime.state.active:  # the chief, still running: stop it first
                self.stopping_for_restart.add(runtime.name)
                self.agents.send(runtime.plan.host, StopTask(task=runtime.name,
                                                             grace_period_s=self._grace_s))
            else:
                self.due[runtime.name] = now + decision.backoff_s

    def _workers(self) -> list[TaskId]:
        return [t.plan.task for t in self.tasks if t.plan.task.type == WORKER]

    # --- starting tasks again ----------------------------------------------------------------

    def _next_deadline(self) -> float | None:
        times = [t for t in (super()._next_deadline(),
                             *(self._start_at(name) for name in self.due)) if t is not None]
        return min(times) if times else None

    def _start_at(self, name: str) -> float:
        """When ``name``, due to be started again, starts: once it is due and the servers it
        waits for have answered (or waiting for them has lasted long enough)."""
        servers, until = self.awaits.get(name, (set(), 0.0))
        return max(self.due[name], until) if servers else self.due[name]

    def _check_health(self) -> None:
        now = self.clock()
        for name in sorted(self.due, key=self._start_at):
            if self._start_at(name) <= now and self.stopping_since is None \
                    and name not in self.alive:
                del self.due[name]
                self.awaits.pop(name, None)
                self._start_again(self.tasks[name].plan)
        super()._check_health()

    def _start_again(self, plan: TaskPlan) -> None:
        task_env = {k: v for k, v in plan.env.items() if k != env.TF_CONFIG}  # the agent's
        if plan.task.type == CHIEF and (resume := self.single.latest()) is not None:
            task_env[env.RESUME_CHECKPOINT] = resume.checkpoint
            task_env.pop(env.RESUME_STEP, None)
            if resume.step is not None:
                task_env[env.RESUME_STEP] = str(resume.step)
        launch = dataclasses.replace(plan.to_launch(), env=task_env)
        self.tasks[str(plan.task)].again()
        self.logs.write(str(plan.task), "--- tfcluster: started again ---")
        if not self.agents.send(plan.host, StartTask(task=launch)):
            self._lose_host(plan.host, self.clock(), f"its agent is gone; {plan.task} cannot "
                            "be started again")

    # --- the result --------------------------------------------------------------------------

    @property
    def _grace_s(self) -> float:
        return self.plan.grace_period_s if self.finished else super()._grace_s

    def _result(self) -> AttemptResult:
        result = super()._result()
        status = result.status
        if self.finished and not self.failures and self.interrupt is None:
            status = AttemptStatus.SUCCEEDED
        return dataclasses.replace(
            result, status=status, training_restarts=self.training_restarts,
            task_restarts=dict(self.restarted), recovered=tuple(self.recovered),
            left_out=tuple(self.left_out), gave_up=self.gave_up, chief_finished=self.finished)
