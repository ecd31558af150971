"""The pure planner: a validated spec plus (attempt, ports, resume point) -> a frozen LaunchPlan.

Nothing here starts a process, opens a socket or reads the clock: ``tfcluster plan`` prints the
result, ``tfcluster run`` hands it to the backends, and tests inspect it directly.
"""

from __future__ import annotations

import os
import posixpath
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from launcher.errors import TfclusterError
from launcher.layout import AGENTS_DIR, PROCESS_TABLE_SUFFIX, REMOTE_AGENTS_DIR
from launcher.netaddr import format_address
from launcher.plan.devices import device_env, gpu_slices
from launcher.spec.model import ClusterSpec
from launcher.spec.rules import TaskSlot
from worker import env
from worker.protocol import Launch, TaskLaunch
from worker.tfconfig import EVALUATOR, TaskId, TFConfig, build_cluster, checkpoint_writer, task_order

#: Interpreter used on remote hosts when the spec does not name one.
REMOTE_PYTHON = "python3"
LOCAL_ADDRESS = "localhost"


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
    user: str | None = None
    ssh_port: int = 22
    identity_file: str | None = None
    known_hosts: str | None = None
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
                 "user": h.user, "ssh_port": None if h.local else h.ssh_port,
                 "tasks": [str(t.task) for t in h.tasks]}
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


def entrypoint_argv(spec: ClusterSpec, python: str) -> tuple[str, ...]:
    """Python entrypoints run under ``worker.bootstrap`` (traceback capture, stack dumps)."""
    entry = spec.entrypoint
    if entry.module is not None:
        return (python, "-m", "worker.bootstrap", "-m", entry.module, *entry.args)
    if entry.script is not None:
        return (python, "-m", "worker.bootstrap", entry.script, *entry.args)
    command = list(entry.command or [])
    return (*command, *entry.args)


def needs_port(slot: TaskSlot) -> bool:
    return slot.task.type != EVALUATOR


def ports_to_allocate(spec: ClusterSpec) -> list[TaskId]:
    """Tasks whose port tfcluster must choose (local tasks the spec gave no port)."""
    return [s.task for s in spec.task_slots() if s.port is None and needs_port(s)]


def plan(
    spec: ClusterSpec,
    *,
    attempt: int,
    run_dir: str,
    ports: Mapping[TaskId, int] | None = None,
    resume: ResumePoint | None = None,
    local_python: str = REMOTE_PYTHON,
    base_dir: str = ".",
    local_address: str = LOCAL_ADDRESS,
) -> LaunchPlan:
    """Everything ``run`` will start for one attempt. ``ports`` fills in the tasks whose port the
    spec leaves to tfcluster; relative local paths are resolved against ``base_dir``; local tasks
    appear in TF_CONFIG at ``local_address`` (``localhost`` unless other hosts must reach them)."""
    ports = ports or {}
    slots = spec.task_slots()
    port_of: dict[TaskId, int | None] = {}
    for slot in slots:
        port = slot.port if slot.port is not None else ports.get(slot.task)
        if port is None and needs_port(slot):
            raise PlanError(f"no port for task {slot.task} on {slot.host}")
        port_of[slot.task] = port if needs_port(slot) else None

    def address(slot: TaskSlot) -> str:
        host = local_address if spec.is_local(slot.host) else spec.address_of(slot.host)
        return format_address(host, port_of[slot.task] or 0)

    cluster = build_cluster({s.task: address(s) for s in slots if needs_port(s)})
    checkpoint_dir = _checkpoint_dir(spec, slots, base_dir)
    base_env = {"PYTHONUNBUFFERED": "1", **spec.env}
    slices = gpu_slices(spec)
    host_tasks: dict[str, list[TaskPlan]] = {}
    for slot in slots:
        local = spec.is_local(slot.host)
        python = spec.python or (local_python if local else REMOTE_PYTHON)
        tf_config = TFConfig(cluster=cluster, task=slot.task)
        task_env = {
            **base_env,
            env.TF_CONFIG: tf_config.to_json(),
            env.JOB: spec.name,
            env.TASK: str(slot.task),
            env.ATTEMPT: str(attempt),
            env.RUN_DIR: run_dir,
            env.GRACE_PERIOD_S: repr(spec.health.grace_period_s),
            **device_env(slices, slot.task),
        }
        if checkpoint_dir is not None:
            task_env[env.CHECKPOINT_DIR] = checkpoint_dir
        if resume is not None:
            task_env[env.RESUME_CHECKPOINT] = resume.checkpoint
            if resume.step is not None:
                task_env[env.RESUME_STEP] = str(resume.step)
        cwd = _local_path(spec.workdir, base_dir) if local else spec.workdir
        host_tasks.setdefault(slot.host, []).append(TaskPlan(
            task=slot.task, host=slot.host, port=port_of[slot.task], tf_config=tf_config,
            argv=entrypoint_argv(spec, python), env=task_env, cwd=cwd))
    hosts = tuple(replace(_host_plan(spec, name, tuple(tasks), local_python),
                          gpus_needed=sum(len(slices.get(t.task, ())) for t in tasks))
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


@dataclass(frozen=True)
class Planner:
    """The one way the job is planned: a spec and what is fixed for a whole run (run directory,
    this machine's interpreter, base directory and address). ``tfcluster plan``, pre-flight and
    every attempt of the coordinator go through it."""

    spec: ClusterSpec
    run_dir: str = ""
    local_python: str = REMOTE_PYTHON
    base_dir: str = "."
    local_address: str = LOCAL_ADDRESS

    @property
    def ports_to_allocate(self) -> list[TaskId]:
        return ports_to_allocate(self.spec)

    def plan(self, attempt: int, ports: Mapping[TaskId, int] | None = None,
             resume: ResumePoint | None = None) -> LaunchPlan:
        return plan(self.spec, attempt=attempt, run_dir=self.run_dir, ports=ports,
                    resume=resume, local_python=self.local_python, base_dir=self.base_dir,
                    local_address=self.local_address)

    def preview(self) -> LaunchPlan:
        """The plan ``run`` would make, with port 0 standing for the ports allocated at run time
        (those are local, chosen free when the job starts): what pre-flight checks."""
        return self.plan(0, dict.fromkeys(self.ports_to_allocate, 0))


def _host_plan(spec: ClusterSpec, name: str, tasks: tuple[TaskPlan, ...],
               local_python: str) -> HostPlan:
    if spec.is_local(name):
        return HostPlan(name=name, local=True, address=LOCAL_ADDRESS,
                        python=spec.python or local_python, tasks=tasks)
    host = spec.hosts[name]
    return HostPlan(name=name, local=False, address=spec.address_of(name),
                    python=spec.python or REMOTE_PYTHON, tasks=tasks, user=host.user,
                    ssh_port=host.port, identity_file=host.identity_file,
                    known_hosts=host.known_hosts)


def _local_path(path: str, base_dir: str) -> str:
    return os.path.normpath(os.path.join(base_dir, os.path.expanduser(path)))


def _checkpoint_dir(spec: ClusterSpec, slots: list[TaskSlot], base_dir: str) -> str | None:
    """The chief's checkpoint directory, absolute when the chief runs on this machine."""
    if spec.checkpoint is None:
        return None
    writer = checkpoint_writer(s.task for s in slots)
    chief_host = next(s.host for s in slots if s.task == writer)
    if spec.is_local(chief_host):
        return _local_path(spec.checkpoint.dir, base_dir)
    return spec.checkpoint.dir
