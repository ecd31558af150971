"""The cluster spec as pydantic models: ``ClusterSpec`` and its sections, valid once constructed.

Every way a spec can be wrong ends in one ``SpecError`` that lists *all* its problems at once, each
with a field path (``tasks[2].port``, ``hosts.node-a.port``, ``name``) and a message written for a
person; no traceback ever reaches the user for a bad spec. Relative paths (``workdir``,
``checkpoint.dir``) and ``~`` are kept as written: resolving them is the planner's job, against the
spec file's directory (:func:`launcher.spec.loading.spec_base_dir`), as compose files do.

YAML details: mapping keys are always taken as written (``ON:`` is the string ``"ON"``, not
``True``), duplicate keys are an error, and unquoted scalars under ``env`` and in
``entrypoint.args`` / ``entrypoint.command`` keep their exact text (``1.10`` stays ``"1.10"``).
"""

from __future__ import annotations

import ipaddress
import posixpath
import re
from typing import Annotated, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    field_validator,
    model_validator,
)

from launcher.spec.entrypoint import EntrypointSpec
from launcher.spec.errors import FieldProblems
from launcher.spec.health import HealthSpec, RestartSpec
from launcher.spec.limits import (
    PathText,
    Text,
    check_task_count,
    check_text,
    env_entry_problem,
    exec_size,
    exec_size_problem,
    scalar_to_str,
    show_text,
)
from launcher.spec.placement import (
    PlacementSpec,
    SlurmSection,
    effective_placement,
    placement_problems,
)
from launcher.spec.resources import ResourcesSpec, resource_problems
from launcher.spec.rules import (
    SINGLETON_LIMITS,
    TaskSlot,
    cluster_problems,
    expand,
    is_local,
    tf_config_size,
)
from launcher.spec.strategy import (
    PARAMETER_SERVER,
    Strategy,
    strategy_in_force,
    strategy_problems,
)
from worker.wire.env import TF_CONFIG
from worker.wire.tfconfig import PS, TRAINING_TYPES, WORKER, TaskId, checkpoint_writer

#: Env var names tfcluster sets itself, so a spec may not set them.
RESERVED_ENV_PREFIX = "TFCLUSTER_"

_MAX_PORT = 65535
_JOB_NAME = re.compile(r"[a-z0-9][a-z0-9_-]{0,62}")
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_HOST_LABEL = re.compile(r"[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?")


# --- field types ---------------------------------------------------------------------------------


def _check_host_name(value: str) -> str:
    try:
        ipaddress.ip_address(value)
    except ValueError:
        labels = value.split(".")
        if len(value) > 253 or not all(_HOST_LABEL.fullmatch(label) for label in labels):
            raise ValueError(
                f"not a valid host name or IP address (got {show_text(value)}): use letters, "
                "digits and '-' in dot-separated labels of at most 63 characters"
            ) from None
    return value


def _check_env_name(value: str) -> str:
    if not _ENV_NAME.fullmatch(value):
        raise ValueError(
            "not a valid environment variable name (letters, digits and '_', not starting with a "
            "digit)"
        )
    if value == TF_CONFIG or value.startswith(RESERVED_ENV_PREFIX):
        raise ValueError(f"{value} is set by tfcluster itself and cannot be set in env")
    return value


def empty_if_null(value: object) -> object:
    return {} if value is None else value


HostName = Annotated[str, AfterValidator(_check_host_name)]
Port = Annotated[int, Field(strict=True, ge=1, le=_MAX_PORT)]
EnvName = Annotated[str, AfterValidator(_check_env_name)]
EnvValue = Annotated[str, BeforeValidator(scalar_to_str), AfterValidator(check_text)]
NonEmptyStr = Annotated[Text, Field(min_length=1)]

#: Each model's validator is built when a spec is first validated (``defer_build``), as one
#: schema for the whole spec, not once per section at import: tfcluster starts a few ms sooner.
_FROZEN = ConfigDict(extra="forbid", frozen=True, defer_build=True)


# --- models --------------------------------------------------------------------------------------


class HostSpec(BaseModel):
    """How to reach a remote host over SSH. ``~`` in file paths is kept as written."""

    model_config = _FROZEN

    address: HostName | None = Field(default=None,
        description="Address to connect to; null: the host's own name (its key under `hosts`).")
    user: NonEmptyStr | None = Field(default=None,
        description="SSH login name; null: ~/.ssh/config's User, else the local user.")
    port: Port = Field(default=22, description="SSH port.")
    identity_file: PathText | None = Field(default=None,
        description=("Private key to log in with (~ allowed; relative to the spec file's directory); null: "
                     "~/.ssh/config's IdentityFile, ssh-agent keys and the default keys."))
    known_hosts: PathText | None = Field(default=None,
        description=("known_hosts file that verifies the host's key (relative to the spec file's "
                     "directory); null: ~/.ssh/config's UserKnownHostsFile, else ~/.ssh/known_hosts."))


#: ``node-a:`` with no value under ``hosts`` means a host with every default.
HostEntry = Annotated[HostSpec, BeforeValidator(empty_if_null)]


class TaskGroupSpec(BaseModel):
    """``count`` tasks of one type on one host; with a port they use ``port``, ``port+1``, ..."""

    model_config = _FROZEN

    type: Literal["chief", "worker", "ps", "evaluator"] = Field(
        description=("Task type: chief (at most one), worker, ps (parameter_server jobs) or evaluator (at "
                     "most one, left out of TF_CONFIG's cluster)."))
    host: HostName = Field(default="localhost",
        description=("Host the group's tasks run on: localhost, or a name declared under hosts. Omitted with "
                     "placement or slurm."))
    port: Port | None = Field(default=None,
        description=("Port of the group's first task (then port+1, ...); null: allocated at run "
                     "time, which only local hosts allow."))
    count: Annotated[int, Field(strict=True, ge=1), AfterValidator(check_task_count)] = Field(default=1,
        description="How many tasks of this type (worker:0, worker:1, ...).")
    entrypoint: EntrypointSpec | None = Field(default=None,
        description=("What this group's tasks run instead of the job's `entrypoint` (e.g. a custom server "
                     "for a parameter_server job's workers or ps, whose default is `python -m "
                     "worker.server`)."))

    @model_validator(mode="after")
    def _group_rules(self) -> TaskGroupSpec:
        if self.type in SINGLETON_LIMITS and self.count > 1:
            message = f"{SINGLETON_LIMITS[self.type]}, got count {self.count}"
            raise FieldProblems([("count", message)])
        if self.port is not None and self.port + self.count - 1 > _MAX_PORT:
            last = self.port + self.count - 1
            raise FieldProblems(
                [("count", f"ports {self.port}..{last} go past {_MAX_PORT}: lower port or count")]
            )
        return self


class CheckpointSpec(BaseModel):
    """Where the chief writes its checkpoints (kept as written; may be relative)."""

    model_config = _FROZEN

    dir: PathText = Field(
        description=("The chief's checkpoint directory (TFCLUSTER_CHECKPOINT_DIR; a local chief's: "
                     "relative to the spec file's directory); absolute when the chief is remote, on "
                     "storage every host can read."))


class ClusterSpec(BaseModel):
    """A whole job: what to run, where, and how to keep it healthy. Valid once constructed."""

    model_config = _FROZEN

    name: str = Field(
        description=("Job name: 1-63 lowercase letters, digits, '-' or '_' (TFCLUSTER_JOB, the run "
                     "directory's name)."))
    entrypoint: EntrypointSpec = Field(
        description=("What the tasks run (in a parameter_server job: the chief's ClusterCoordinator "
                     "program)."))
    strategy: Strategy | None = Field(default=None,
        description=("TensorFlow's multi-worker strategy; null: parameter_server "
                     "when a ps task exists, else multi_worker_mirrored."))
    python: PathText | None = Field(default=None,
        description="Interpreter on each host; null: the coordinator's own on local hosts.")
    workdir: PathText = Field(default=".",
        description=("Working directory of every task (local hosts: relative to the spec file's "
                     "directory, as in compose files)."))
    env: dict[EnvName, EnvValue] = Field(default={},
        description=("Environment variables added to every task's (TF_CONFIG and TFCLUSTER_* are tfcluster's "
                     "own)."))
    checkpoint: CheckpointSpec | None = Field(default=None,
        description="Where the chief writes its checkpoints; null: tfcluster finds none to resume from.")
    hosts: dict[HostName, HostEntry] = Field(default={},
        description="How to reach each remote host over SSH, by name; localhost needs no entry.")
    tasks: Annotated[list[TaskGroupSpec], Field(min_length=1)] = Field(
        description=("The task groups: the chief, workers, ps and evaluator, each with its host, port and "
                     "count."))
    restart: Annotated[RestartSpec, Field(description=(
        "How often and how soon the job is restarted, what counts as a preemption, warm spares, "
        "failure rules."))] = Field(default_factory=RestartSpec)
    health: Annotated[HealthSpec, Field(description=(
        "Deadlines and thresholds after which a task counts as stuck, hung, lost, slow or short "
        "of memory."))] = Field(default_factory=HealthSpec)
    placement: PlacementSpec | None = Field(default=None,
        description=("Place the tasks from a pool of hosts, with spares and an elastic size."))
    slurm: SlurmSection | None = Field(default=None,
        description="Place the tasks on a Slurm allocation's nodes instead of on named hosts.")
    resources: ResourcesSpec | None = Field(default=None,
        description="GPUs per task (CUDA_VISIBLE_DEVICES slices) and per host.")
    startup_concurrency: Annotated[int, Field(strict=True, ge=0)] | None = Field(default=None,
        description=("How many of a host's tasks may be in their start-up at once "
                     "(each until its interpreter is up); null: as many as the host has CPUs; "
                     "0: all at once."))
    @field_validator("name")
    @classmethod
    def _job_name(cls, value: str) -> str:
        if not _JOB_NAME.fullmatch(value):
            raise ValueError(
                "must be 1-63 lowercase letters, digits, '-' or '_', starting with a letter or "
                f"digit (got {show_text(value)})"
            )
        return value

    @field_validator("env")
    @classmethod
    def _env_entries_fit(cls, value: dict[str, str]) -> dict[str, str]:
        problems = [(name, problem) for name, text in value.items()
                    if (problem := env_entry_problem(name, text))]
        if problems:
            raise FieldProblems(problems)
        return value

    @model_validator(mode="after")
    def _cluster_rules(self) -> ClusterSpec:
        if wrong := list(strategy_problems(self.strategy, self.tasks,
                                           self.placement is not None or self.slurm is not None)):
            raise FieldProblems(wrong)
        if placed := list(placement_problems(self.placement, self.slurm, self.tasks,
                                             list(self.hosts), self.max_workers)):
            raise FieldProblems(placed)
        if self.placement is not None and (unknown := self._unknown_pool_hosts()):
            raise FieldProblems(unknown)
        problems = sorted(cluster_problems(list(enumerate(self.tasks)), self.hosts, complete=True),
                          key=lambda p: path_order(p.path))
        if problems:
            raise FieldProblems([(p.path, p.message) for p in problems])
        if self.resources is not None and (short := list(resource_problems(
                self.resources, [s.host for s in self.task_slots()], self.env))):
            raise FieldProblems(short)
        words = [word for entry in (self.entrypoint, *(g.entrypoint for g in self.tasks))
                 if entry is not None for word in (*(entry.command or ()), *entry.args)]
        tf_config = tf_config_size(list(enumerate(self.tasks)), self.hosts)
        too_big = exec_size_problem(exec_size(words, self.env, tf_config))
        if too_big:
            raise FieldProblems([("env", too_big)])
        chief = self._chief_host()
        if (self.checkpoint is not None and chief is not None and not self.is_local(chief)
                and not posixpath.isabs(self.checkpoint.dir)):
            raise FieldProblems([("checkpoint.dir", f"must be an absolute path: the chief runs on "
                              f"the remote host {chief!r}, where a relative path (or ~) would "
                              "not mean the same to every task and to tfcluster")])
        return self

    def _unknown_pool_hosts(self) -> list[tuple[str, str]]:
        problems = []
        for position, host in enumerate(self.pool.hosts or () if self.pool else ()):
            try:
                _check_host_name(host)
            except ValueError as exc:
                problems.append((f"placement.hosts[{position}]", str(exc)))
                continue
            if host not in self.hosts and not self.is_local(host):
                problems.append((f"placement.hosts[{position}]", f"{host!r} is not declared "
                                 "under hosts: add it there (with its address)"))
        return problems

    @property
    def pool(self) -> PlacementSpec | None:
        """How tasks are placed from a pool of hosts (``placement``, or ``slurm``'s old
        fields); None: every task runs on the host it names."""
        return effective_placement(self.placement, self.slurm)

    @property
    def max_workers(self) -> int:
        """Training tasks (chief and workers) the spec asks for: the job's full size."""
        return sum(g.count for g in self.tasks if g.type in TRAINING_TYPES)

    @property
    def parameter_server(self) -> bool:
        """Whether the job runs ParameterServerStrategy (launcher.spec.strategy)."""
        return strategy_in_force(self.strategy, self.tasks) == PARAMETER_SERVER

    def entrypoint_of(self, task: TaskId) -> EntrypointSpec | None:
        """What ``task`` runs: its group's entrypoint, else the job's; None for a worker or ps
        of a parameter_server job with none of its own (tfcluster's TF server runs there).
        Walks the groups, not every task: the planner asks this for each task of the job."""
        before = 0  # tasks of ``task.type`` in the groups before this one (as ``expand`` numbers)
        for group in self.tasks:
            if group.type != task.type:
                continue
            if task.index < before + group.count:
                if group.entrypoint is not None:
                    return group.entrypoint
                break
            before += group.count
        if self.parameter_server and task.type in (WORKER, PS):
            return None
        return self.entrypoint

    def _chief_host(self) -> str | None:
        """Host of the task that writes checkpoints (:func:`worker.wire.tfconfig.checkpoint_writer`)."""
        if self.pool is not None and self.pool.hosts is not None:
            remote = [h for h in self.pool.hosts if not self.is_local(h)]
            return remote[0] if remote else self.pool.hosts[0]
        slots = self.task_slots()
        writer = checkpoint_writer(s.task for s in slots)
        return next((s.host for s in slots if s.task == writer), None)

    @property
    def engine(self) -> str:
        """What runs the job: a module of ``launcher.backends`` (ARCHITECTURE.md, "Engines")."""
        if self.slurm is not None or (self.pool is not None and self.pool.hosts is None):
            return "slurm"
        names = self.pool.hosts if self.pool is not None and self.pool.hosts else \
            [slot.host for slot in self.task_slots()]
        return "ssh" if any(not self.is_local(name) for name in names) else "local"

    def is_local(self, host: str) -> bool:
        """True if ``host`` is this machine: a local name not declared under ``hosts``."""
        return is_local(host, self.hosts)

    def address_of(self, host: str) -> str:
        """The address to reach ``host`` at: its ``hosts`` entry's address, else the name itself."""
        declared = self.hosts.get(host)
        return declared.address if declared and declared.address else host

    def task_slots(self) -> list[TaskSlot]:
        """Every task, counts expanded, numbered per type in order of appearance."""
        return [slot for _, slot in expand(list(enumerate(self.tasks)))]


def path_order(path: str) -> tuple[int, int]:
    """Sort key putting problems in the order of ``ClusterSpec``'s fields, tasks by position."""
    fields = list(ClusterSpec.model_fields)
    top = re.match(r"[^.\[]*", path)
    first = top.group(0) if top else ""
    position = re.match(r"tasks\[(\d+)\]", path)
    return (
        fields.index(first) if first in fields else len(fields),
        int(position.group(1)) if position else -1,
    )
