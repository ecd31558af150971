"""The pure planner: a validated spec plus (attempt, ports, resume point) -> a frozen LaunchPlan.

Nothing here starts a process, opens a socket or reads the clock: ``tfcluster plan`` prints the
result, ``tfcluster run`` hands it to the backends, and tests inspect it directly.
"""

from __future__ import annotations

import os
import posixpath
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from launcher.errors import TfclusterError
from launcher.layout import AGENTS_DIR, PROCESS_TABLE_SUFFIX, REMOTE_AGENTS_DIR
from launcher.netaddr import format_address
from launcher.plan.devices import device_env, gpu_slices
from launcher.plan.placement import (
    LOCAL_ADDRESS,
    PastAttempt,
    PlacedHost,
    Placement,
    absolute,
    needs_port,
)
from launcher.plan.pool import HostPool
from launcher.spec.entrypoint import EntrypointSpec
from launcher.spec.model import ClusterSpec
from worker.wire import env
from worker.wire.process_mark import process_mark
from worker.wire.protocol import Launch, TaskLaunch
from worker.wire.tfconfig import (
    TRAINING_TYPES,
    TaskId,
    TFConfig,
    build_cluster,
    checkpoint_writer,
    task_order,
)


class PlanError(TfclusterError):
    """The spec cannot be planned as asked (e.g. a port for a task is missing)."""


@dataclass(frozen=True)
class ResumePoint:
    """The checkpoint every task of the next attempt restores."""

    checkpoint: str
    step: int | None  # None when the checkpoint's name carries no step number


@dataclass(frozen=True)
class TaskPlan:
    task: TaskId
    host: str
    port: int | None  # None for an evaluator, which serves nothing
    tf_config: TFConfig
    argv: tuple[str, ...]
    env: Mapping[str, str]
    cwd: str

    def to_launch(self) -> TaskLaunch:
        return TaskLaunch(task=str(self.task), argv=list(self.argv), env=dict(self.env),
                          cwd=self.cwd)


@dataclass(frozen=True)
class HostPlan:
    """One agent: where it runs and the tasks it starts."""

    name: str
    local: bool
    address: str
    python: str
    tasks: tuple[TaskPlan, ...]
    #: How the host is reached, as ``tfcluster plan`` says it (the engine's words).
    where: str = "local"
    gpus_needed: int = 0  # GPUs the host must have: its tasks' CUDA_VISIBLE_DEVICES slices


@dataclass(frozen=True)
class LaunchPlan:
    job: str
    attempt: int
    run_dir: str
    checkpoint_dir: str | None
    resume: ResumePoint | None
    hosts: tuple[HostPlan, ...]
    heartbeat_interval_s: float
    grace_period_s: float
    heartbeat_timeout_s: float | None = None
    failure_grace_period_s: float | None = None  # None: grace_period_s
    #: Exit codes that mean "saved, restart me" (TensorFlow's PreemptionCheckpointHandler: 42,
    #: or 143 on GCE and for the worker helpers).
    preemption_exit_codes: frozenset[int] = frozenset({42, 143})
    #: Warm spares: what each spare imports first (None: no spares; see restart.warm_spares).
    preload: tuple[str, ...] | None = None
    spare_fill_delay_s: float = 30.0
    #: How many of a host's tasks start at once (the spec's; None: the host's CPUs; 0: all).
    startup_concurrency: int | None = None
    cluster: Mapping[str, tuple[str, ...]] = field(default_factory=dict)

    @property
    def tasks(self) -> tuple[TaskPlan, ...]:
        tasks = (t for h in self.hosts for t in h.tasks)
        return tuple(sorted(tasks, key=lambda t: task_order(t.task)))

    @property
    def workers(self) -> int:
        """Training tasks (chief and workers) the attempt runs."""
        return sum(1 for t in self.tasks if t.task.type in TRAINING_TYPES)

    @property
    def ports(self) -> dict[str, int]:
        """The port of every task that serves one, by task name."""
        return {str(t.task): t.port for t in self.tasks if t.port is not None}

    @property
    def chief_host(self) -> HostPlan:
        """The host of the task that writes checkpoints (chief:0, else worker:0)."""
        writer = checkpoint_writer(t.task for t in self.tasks)
        return self.host_of(writer if writer is not None else self.tasks[0].task)

    def host_of(self, task: TaskId) -> HostPlan:
        for host in self.hosts:
            if any(t.task == task for t in host.tasks):
                return host
        raise KeyError(str(task))

    def launch_message(self, host: HostPlan) -> Launch:
        """What ``host``'s agent is sent: TF_CONFIG travels as the shared ``cluster`` once."""
        tasks = [t.to_launch() for t in host.tasks]
        for task in tasks:
            task.env.pop(env.TF_CONFIG, None)
        return Launch(job=self.job, attempt=self.attempt, tasks=tasks,
                      cluster={kind: list(addrs) for kind, addrs in self.cluster.items()},
                      heartbeat_interval_s=self.heartbeat_interval_s,
                      grace_period_s=self.grace_period_s,
                      coordinator_timeout_s=self.heartbeat_timeout_s,
                      process_table=self.process_table(host),
                      process_mark=process_mark(self.run_dir, host.name) if self.run_dir else None,
                      preload=None if self.preload is None else list(self.preload),
                      spare_fill_delay_s=self.spare_fill_delay_s,
                      startup_concurrency=self.startup_concurrency)

    def process_table(self, host: HostPlan) -> str | None:
        """Where ``host``'s agent records every process it owns, the same file for every attempt,
        so that what a killed agent left is found and killed (by the coordinator for a local
        agent, by the next agent on a remote host). None without a run directory (a preview)."""
        if not self.run_dir:
            return None
        if host.local:
            return os.path.join(self.run_dir, AGENTS_DIR, f"{host.name}{PROCESS_TABLE_SUFFIX}")
        return remote_process_table(self.run_dir, host.name)

    def to_dict(self) -> dict[str, Any]:
        """The JSON form printed by ``tfcluster plan --json`` (a contract: tests read it)."""
        return {
            "job": self.job,
            "attempt": self.attempt,
            "run_dir": self.run_dir,
            "checkpoint_dir": self.checkpoint_dir,
            "resume": None if self.resume is None else
            {"checkpoint": self.resume.checkpoint, "step": self.resume.step},
            "cluster": {kind: list(addrs) for kind, addrs in self.cluster.items()},
            "hosts": [
                {"name": h.name, "local": h.local, "address": h.address, "python": h.python,
                 "where": h.where, "tasks": [str(t.task) for t in h.tasks]}
                for h in self.hosts
            ],
            "tasks": [
                {"task": str(t.task), "host": t.host, "port": t.port,
                 "tf_config": t.tf_config.to_dict(), "argv": list(t.argv), "env": dict(t.env),
                 "cwd": t.cwd}
                for t in self.tasks
            ],
        }


def _preload(spec: ClusterSpec) -> tuple[str, ...] | None:
    """What warm spares import: only for Python entrypoints, which run under the bootstrap."""
    entry = spec.entrypoint
    if not spec.restart.warm_spares or entry.command is not None:
        return None
    return tuple(entry.preload)


def remote_process_table(run_dir: str, host: str) -> str:
    """The process table of ``host``'s agent, on that host (``~`` is its login's home)."""
    run = os.path.normpath(run_dir)
    import hashlib  # here: only remote hosts need it, and it loads OpenSSL

    unique = hashlib.sha256(run.encode()).hexdigest()[:12]  # runs may share a basename
    name = f"{os.path.basename(run)}-{unique}-{host}{PROCESS_TABLE_SUFFIX}"
    return posixpath.join(REMOTE_AGENTS_DIR, name)


#: What a parameter_server job's workers and ps run when their group names no entrypoint.
SERVER_MODULE = "worker.server"


def entrypoint_argv(entry: EntrypointSpec | None, python: str) -> tuple[str, ...]:
    """Python entrypoints run under ``worker.runtime.bootstrap`` (traceback capture, stack dumps);
    None is tfcluster's TF server (:data:`SERVER_MODULE`)."""
    if entry is None:
        return (python, "-m", "worker.runtime.bootstrap", "-m", SERVER_MODULE)
    if entry.module is not None:
        return (python, "-m", "worker.runtime.bootstrap", "-m", entry.module, *entry.args)
    if entry.script is not None:
        return (python, "-m", "worker.runtime.bootstrap", entry.script, *entry.args)
    command = list(entry.command or [])
    return (*command, *entry.args)


def plan(spec: ClusterSpec, placement: Placement, *, attempt: int, run_dir: str,
         ports: Mapping[TaskId, int] | None = None, resume: ResumePoint | None = None,
         base_dir: str = ".") -> LaunchPlan:
    """Everything ``run`` will start for one attempt, with the tasks where ``placement`` puts
    them. ``ports`` fills in the tasks whose port the placement leaves to tfcluster; relative
    paths are resolved against ``base_dir`` on hosts that resolve paths (this machine, or nodes
    sharing its file system)."""
    ports = ports or {}
    port_of: dict[TaskId, int | None] = {}
    for placed in placement.tasks:
        port = placed.port if placed.port is not None else ports.get(placed.task)
        if port is None and needs_port(placed.task):
            raise PlanError(f"no port for task {placed.task} on {placed.host}")
        port_of[placed.task] = port if needs_port(placed.task) else None
    cluster = build_cluster({p.task: format_address(placement.host(p.host).address,
                                                    port_of[p.task] or 0)
                             for p in placement.tasks if needs_port(p.task)})
    checkpoint_dir = _checkpoint_dir(spec, placement, base_dir)
    base_env = {"PYTHONUNBUFFERED": "1", **spec.env}
    slices = gpu_slices(spec)
    workers = sum(1 for placed in placement.tasks if placed.task.type in TRAINING_TYPES)
    host_tasks: dict[str, list[TaskPlan]] = {}
    for placed in placement.tasks:
        host = placement.host(placed.host)
        tf_config = TFConfig(cluster=cluster, task=placed.task)
        task_env = {
            **base_env,
            env.TF_CONFIG: tf_config.to_json(),
            env.JOB: spec.name,
            env.TASK: str(placed.task),
            env.ATTEMPT: str(attempt),
            env.RUN_DIR: run_dir,
            env.GRACE_PERIOD_S: repr(spec.health.grace_period_s),
            env.DO_NOT_RESTART: str(env.DO_NOT_RESTART_EXIT_CODE),
            env.NUM_WORKERS: str(workers),
            env.MAX_WORKERS: str(spec.max_workers),
            **device_env(slices, placed.task),
        }
        if checkpoint_dir is not None:
            task_env[env.CHECKPOINT_DIR] = checkpoint_dir
        if resume is not None:
            task_env[env.RESUME_CHECKPOINT] = resume.checkpoint
            if resume.step is not None:
                task_env[env.RESUME_STEP] = str(resume.step)
        cwd = absolute(spec.workdir, base_dir) if host.resolves_paths else spec.workdir
        host_tasks.setdefault(placed.host, []).append(TaskPlan(
            task=placed.task, host=placed.host, port=port_of[placed.task], tf_config=tf_config,
            argv=entrypoint_argv(spec.entrypoint_of(placed.task), host.python), env=task_env,
            cwd=cwd))
    hosts = tuple(_host_plan(placement.host(name), tuple(tasks),
                             sum(len(slices.get(t.task, ())) for t in tasks))
                  for name, tasks in host_tasks.items())
    return LaunchPlan(job=spec.name, attempt=attempt, run_dir=run_dir,
                      checkpoint_dir=checkpoint_dir, resume=resume, hosts=hosts,
                      heartbeat_interval_s=spec.health.heartbeat_interval_s,
                      grace_period_s=spec.health.grace_period_s,
                      heartbeat_timeout_s=spec.health.heartbeat_timeout_s,
                      failure_grace_period_s=spec.health.failure_grace_period_s,
                      preemption_exit_codes=frozenset(spec.restart.preemption_exit_codes),
                      preload=_preload(spec),
                      spare_fill_delay_s=spec.restart.spare_fill_delay_s,
                      startup_concurrency=spec.startup_concurrency,
                      cluster=cluster)


#: How an engine places the job for the next attempt, given the attempts so far.
Place = Callable[[ClusterSpec, Sequence[PastAttempt]], Placement]


@dataclass(frozen=True)
class Planner:
    """The one way the job is planned: a spec, the engine's placement, and what is fixed for a
    whole run (run directory, base directory). ``tfcluster plan``, pre-flight and every attempt
    of the coordinator go through it; the placement is asked again for every plan, never kept."""

    spec: ClusterSpec
    place: Place
    run_dir: str = ""
    base_dir: str = "."
    #: The pool's standing, when the spec places its tasks from a pool (``place`` is its own).
    pool: HostPool | None = None

    def placement(self, history: Sequence[PastAttempt] = ()) -> Placement:
        return self.place(self.spec, history)

    @property
    def ports_to_allocate(self) -> list[TaskId]:
        return self.placement().ports_to_allocate

    def plan(self, attempt: int, ports: Mapping[TaskId, int] | None = None,
             resume: ResumePoint | None = None,
             history: Sequence[PastAttempt] = ()) -> LaunchPlan:
        return plan(self.spec, self.placement(history), attempt=attempt, run_dir=self.run_dir,
                    ports=ports, resume=resume, base_dir=self.base_dir)

    def preview(self) -> LaunchPlan:
        """The plan ``run`` would make, with port 0 standing for the ports allocated at run time
        (those are local, chosen free when the job starts): what pre-flight checks."""
        return self.plan(0, dict.fromkeys(self.ports_to_allocate, 0))


def _host_plan(host: PlacedHost, tasks: tuple[TaskPlan, ...], gpus: int) -> HostPlan:
    return HostPlan(name=host.name, local=host.local,
                    address=LOCAL_ADDRESS if host.local else host.address, python=host.python,
                    tasks=tasks, where=host.where, gpus_needed=gpus)


def _checkpoint_dir(spec: ClusterSpec, placement: Placement, base_dir: str) -> str | None:
    """The chief's checkpoint directory, absolute when the chief's host resolves paths."""
    if spec.checkpoint is None:
        return None
    writer = checkpoint_writer(p.task for p in placement.tasks)
    chief = next(p for p in placement.tasks if p.task == writer)
    if placement.host(chief.host).resolves_paths:
        return absolute(spec.checkpoint.dir, base_dir)
    return spec.checkpoint.dir
