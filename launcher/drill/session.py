"""Running a drill: an optional baseline, then each scenario (``repeat`` times) in its own run
directory, each judged on its own: every fault injected, ``term`` faults lost no step, the job
succeeded, its result and its final step equal the baseline's, and, in a job that restarts its
tasks one at a time (``parameter_server``), each fault restarted the tasks it should
(:mod:`launcher.drill.expected_restarts`).

How a job is run is given by the caller (:data:`RunJob`, the command line's ``run_job``), so that
this layer does not depend on the composition root. Each run gets its own checkpoint directory
(``<run dir>/checkpoints``): a scenario must not resume from the previous one's checkpoints.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from launcher.drill.coordinator_loss import ChildRunner, LossReport, run_with_coordinator_loss
from launcher.drill.expected_restarts import restart_problems
from launcher.drill.faults import Action, Fault
from launcher.drill.figures import RunFigures, run_figures
from launcher.drill.host_loss import HostLosses, locate_losses, restore_or_say
from launcher.drill.injector import FaultInjector, Planned, resolve
from launcher.drill.partition import NamespaceLink, NamespacePartitioner, locate
from launcher.drill.verdict import (
    Baseline,
    Verdict,
    attempt_sizes,
    baseline_of,
    compare,
    final_result,
    final_step,
)
from launcher.job.hooks import AttemptHooks
from launcher.run.directory import EVENTS_FILE
from launcher.run.event_log import read_events
from launcher.spec.loading import located, spec_base_dir, spec_from_dict
from launcher.spec.model import ClusterSpec

#: Runs ``spec`` to its end with ``run_dir`` as its run directory; returns the exit code.
RunJob = Callable[[ClusterSpec, Path, AttemptHooks | None], int]


@dataclass(frozen=True)
class Plan:
    """What to run: the spec (with a path, for scenarios that run tfcluster as a child)."""

    spec: ClusterSpec
    spec_path: Path
    seed: int
    random_horizon: int
    checkpoint_dir_given: bool = False  # --checkpoint-dir (one scenario): the scenario uses it


@dataclass
class ScenarioResult:
    name: str
    repeat: int
    run_dir: Path
    faults: tuple[Fault, ...]
    planned: tuple[Planned, ...]
    exit_code: int
    figures: RunFigures
    verdict: Verdict
    loss: LossReport | None = None
    checkpointing: bool = True  # the spec has a checkpoint.dir (else every restart is from 0)
    #: The job restarts its tasks one at a time inside an attempt (``parameter_server``).
    restarts_tasks: bool = False
    problems: list[str] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return not self.problems

    def to_dict(self) -> dict[str, Any]:
        return {
            "scenario": self.name, "repeat": self.repeat, "run_dir": str(self.run_dir),
            "faults": [str(f) for f in self.faults],
            "planned": [{"fault": str(p.fault), "tasks": list(p.tasks), "host": p.host,
                         "trigger": p.trigger} for p in self.planned],
            "exit_code": self.exit_code, **self.figures.to_dict(),
            "result": self.verdict.result, "result_check": self.verdict.check.value,
            "sizes": list(self.verdict.sizes), "steps": self.verdict.steps,
            "expected_steps": self.verdict.expected_steps,
            "coordinator_loss": None if self.loss is None else self.loss.to_dict(),
            "passed": self.passed, "problems": self.problems,
        }


def spec_for_run(plan: Plan, run_dir: Path, own: bool = True) -> ClusterSpec:
    """The spec with a checkpoint directory of this run's own: ``<run dir>/checkpoints``, or with
    --checkpoint-dir DIR, DIR itself for the drill's one scenario (``own=False``) and
    ``DIR/<run dir name>`` for the baseline (which must not leave its checkpoints to it)."""
    spec = plan.spec
    if spec.checkpoint is None or (plan.checkpoint_dir_given and not own):
        return spec
    directory = (Path(spec.checkpoint.dir) / run_dir.name if plan.checkpoint_dir_given
                 else run_dir / "checkpoints")
    data = spec.model_dump()
    data["checkpoint"] = {**data["checkpoint"], "dir": str(directory)}
    return located(spec_from_dict(data, source=f"{plan.spec_path} (drill run {run_dir.name})"),
                   spec_base_dir(spec))


def partition_links(spec: ClusterSpec, faults: Sequence[Fault]) -> dict[str, NamespaceLink]:
    """Where each host a ``partition`` fault names can be cut off; raises PartitionError (before
    anything runs) for one that cannot."""
    links = {}
    for fault in faults:
        if fault.action is Action.PARTITION:
            host = fault.target.name
            entry = spec.hosts.get(host)
            links[host] = locate(host, (entry.address or host) if entry else None)
    return links


@dataclass(frozen=True)
class FaultedRun:
    exit_code: int
    #: ``fault_injected`` records of faults applied after the job's last attempt woke (a heal
    #: whose host came back just before the job ended): in no ``events.jsonl``.
    extra: tuple[dict[str, Any], ...] = ()


def run_with_faults(spec: ClusterSpec, run_dir: Path, planned: Sequence[Planned],
                    run_job: RunJob) -> FaultedRun:
    """Run the job with a :class:`FaultInjector` for ``planned``; every partition healed and every
    lost host given back after, whatever happened."""
    checkpoint_dir = spec.checkpoint.dir if spec.checkpoint is not None else None
    faults = [p.fault for p in planned]
    partitioner = NamespacePartitioner(partition_links(spec, faults),
                                       heal_after_s=spec.health.heartbeat_timeout_s + 1.0)
    losses = HostLosses(locate_losses(spec, faults))
    injector = FaultInjector(planned, checkpoint_dir=checkpoint_dir, partitioner=partitioner,
                             host_loser=losses)
    try:
        code = run_job(spec, run_dir, injector)
    finally:
        try:
            partitioner.heal_all()
        finally:
            restore_or_say(losses)
    return FaultedRun(code, tuple({"ts": e.sent_at, "event": e.event_name, **e.record()}
                                  for e in injector.unreported()))


def run_baseline(plan: Plan, run_dir: Path, run_job: RunJob) -> tuple[Baseline, int]:
    """The job once without faults: what it ended with, and its exit code."""
    code = run_job(spec_for_run(plan, run_dir), run_dir, None)
    return baseline_of(run_dir), code


def judge(result: ScenarioResult) -> None:
    """Fill ``result.problems``: each reason the scenario did not prove what it should."""
    fired = {f.fault for f in result.figures.faults}
    for planned in result.planned:
        if str(planned.fault) not in fired:
            result.problems.append(f"{planned.fault} was never injected (its trigger "
                                   f"{planned.trigger} never came): a drill that hurt nothing "
                                   "proved nothing")
    for figures in result.figures.faults:
        if figures.action == Action.TERM and figures.steps_lost and result.checkpointing:
            result.problems.append(f"{figures.fault} lost {figures.steps_lost} step(s): a "
                                   "preemption notice must lose none")
    if result.figures.outcome != "succeeded":
        result.problems.append(f"the job {result.figures.outcome} (exit code {result.exit_code})")
    if result.verdict.failed:
        result.problems.append(f"result {result.verdict.check.value}: {result.verdict.result} "
                               f"(baseline {result.verdict.baseline})")
    if result.figures.outcome == "succeeded" and result.verdict.steps_differ:
        result.problems.append(f"the job ended at step {result.verdict.steps}, the baseline at "
                               f"step {result.verdict.expected_steps}: it did not complete all "
                               "its steps")


def run_scenario(plan: Plan, name: str, faults: Sequence[Fault], *, repeat: int,
                 run_dir: Path, run_job: RunJob, child: ChildRunner,
                 baseline: Baseline | None) -> ScenarioResult:
    spec = spec_for_run(plan, run_dir, own=False)
    slots = spec.task_slots()
    task_hosts = {str(s.task): s.host for s in slots}
    in_job = [f for f in faults if f.action is not Action.KILL_COORDINATOR]
    planned = resolve(in_job, task_hosts, plan.seed + repeat, plan.random_horizon)
    loss: LossReport | None = None
    extra: list[dict[str, Any]] = []
    losses = [f for f in faults if f.action is Action.KILL_COORDINATOR]
    if losses:
        loss = run_with_coordinator_loss(child, spec, run_dir, in_job=in_job, fault=losses[0],
                                         seed=plan.seed + repeat, horizon=plan.random_horizon)
        code = loss.exit_code
        extra += [loss.event] if loss.event is not None else []
        planned = [*planned, *resolve(losses, task_hosts, plan.seed + repeat)]
    else:
        run = run_with_faults(spec, run_dir, planned, run_job)
        code = run.exit_code
        extra += run.extra
    path = run_dir / EVENTS_FILE
    events = read_events(path, torn_ok=True) if path.exists() else []
    verdict = compare(final_result(run_dir), None if baseline is None else baseline.result,
                      attempt_sizes(events), steps=final_step(run_dir),
                      expected_steps=None if baseline is None else baseline.steps)
    result = ScenarioResult(name, repeat, run_dir, tuple(faults), tuple(planned), code,
                            run_figures(events, extra), verdict, loss,
                            checkpointing=spec.checkpoint is not None,
                            restarts_tasks=spec.parameter_server)
    if loss is not None:
        result.problems.extend(loss.problems)
    judge(result)
    if result.restarts_tasks:
        result.problems.extend(restart_problems(result.figures.faults, events,
                                                checkpointing=result.checkpointing))
    return result
