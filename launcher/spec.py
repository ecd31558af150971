"""The cluster spec: the YAML file a user writes, loaded and validated into a ``ClusterSpec``.

Every way a spec can be wrong ends in one ``SpecError`` that lists *all* its problems at once, each
with a field path (``tasks[2].port``, ``hosts.node-a.port``, ``name``) and a message written for a
person; no traceback ever reaches the user for a bad spec. Relative paths (``workdir``,
``checkpoint.dir``) and ``~`` are kept as written: resolving them is the planner's job.

YAML details: mapping keys are always taken as written (``ON:`` is the string ``"ON"``, not
``True``), duplicate keys are an error, and unquoted scalars under ``env`` and in
``entrypoint.args`` / ``entrypoint.command`` keep their exact text (``1.10`` stays ``"1.10"``).
"""

from __future__ import annotations

import contextlib
import difflib
import ipaddress
import os
import posixpath
import re
import shlex
import types
import typing
from collections.abc import Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic_core import ErrorDetails

from worker.env import TF_CONFIG
from worker.tfconfig import CHIEF, EVALUATOR, WORKER, TaskId

#: Host names that mean "this machine" unless they are declared under ``hosts``.
LOCAL_HOSTS = ("localhost", "127.0.0.1", "::1")
#: Env var names tfcluster sets itself, so a spec may not set them.
RESERVED_ENV_PREFIX = "TFCLUSTER_"

_MAX_PORT = 65535
_JOB_NAME = re.compile(r"[a-z0-9][a-z0-9_-]{0,62}")
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_HOST_LABEL = re.compile(r"[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?")
_MODULE_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*")


@dataclass(frozen=True)
class SpecProblem:
    """One thing wrong with a spec: where (``tasks[2].port``, ``""`` for the file) and what."""

    path: str
    message: str

    def __str__(self) -> str:
        return f"{self.path}: {self.message}" if self.path else self.message


class SpecError(Exception):
    """A spec could not be loaded; ``str()`` gives one ``SOURCE: PATH: MESSAGE`` line per problem.

    When a problem has no field path (the file is missing, not YAML, ...) its line is
    ``SOURCE: MESSAGE``.
    """

    def __init__(self, source: str, problems: Sequence[SpecProblem]) -> None:
        super().__init__(source, list(problems))
        self.source = source
        self.problems = list(problems)

    def __str__(self) -> str:
        return "\n".join(f"{self.source}: {problem}" for problem in self.problems)


@dataclass(frozen=True)
class TaskSlot:
    """One task of the job after counts are expanded; ``port`` None means allocated at run time."""

    task: TaskId
    host: str
    port: int | None


class _Problems(ValueError):
    """Raised inside validators for problems whose paths are relative to the model being checked."""

    def __init__(self, problems: Sequence[tuple[str, str]]) -> None:
        super().__init__("; ".join(f"{path}: {message}" for path, message in problems))
        self.problems = list(problems)


# --- field types ---------------------------------------------------------------------------------


def _check_host_name(value: str) -> str:
    try:
        ipaddress.ip_address(value)
    except ValueError:
        labels = value.split(".")
        if len(value) > 253 or not all(_HOST_LABEL.fullmatch(label) for label in labels):
            raise ValueError(
                f"not a valid host name or IP address (got {value!r}): use letters, digits and "
                "'-' in dot-separated labels of at most 63 characters"
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


def _empty_if_null(value: object) -> object:
    return {} if value is None else value


def _scalar_to_str(value: object) -> object:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return str(value)
    return value


HostName = Annotated[str, AfterValidator(_check_host_name)]
Port = Annotated[int, Field(strict=True, ge=1, le=_MAX_PORT)]
EnvName = Annotated[str, AfterValidator(_check_env_name)]
EnvValue = Annotated[str, BeforeValidator(_scalar_to_str)]
Seconds = Annotated[float, Field(strict=True, gt=0, allow_inf_nan=False)]
NonEmptyStr = Annotated[str, Field(min_length=1)]

_FROZEN = ConfigDict(extra="forbid", frozen=True)


# --- models --------------------------------------------------------------------------------------


class EntrypointSpec(BaseModel):
    """What each task runs: exactly one of ``python -m module``, ``python script`` or a command."""

    model_config = _FROZEN

    module: NonEmptyStr | None = None
    script: NonEmptyStr | None = None
    #: argv of a program; a string is split with ``shlex.split`` and never given to a shell.
    command: list[str] | None = None
    args: list[str] = []

    @field_validator("module")
    @classmethod
    def _module_name(cls, value: str | None) -> str | None:
        if value is not None and not _MODULE_NAME.fullmatch(value):
            raise ValueError(f"not a Python module name (got {value!r})")
        return value

    @field_validator("command", mode="before")
    @classmethod
    def _split_command(cls, value: object) -> object:
        if isinstance(value, str):
            try:
                value = shlex.split(value)
            except ValueError as exc:
                raise ValueError(f"cannot split into arguments: {exc}") from None
        if isinstance(value, list) and not value:
            raise ValueError("must not be empty")
        return value

    @model_validator(mode="after")
    def _exactly_one(self) -> EntrypointSpec:
        given = [k for k in ("module", "script", "command") if getattr(self, k) is not None]
        if len(given) != 1:
            got = " and ".join(given) if given else "none"
            raise ValueError(f"give exactly one of module, script, command (got {got})")
        return self


class HostSpec(BaseModel):
    """How to reach a remote host over SSH. ``~`` in file paths is kept as written."""

    model_config = _FROZEN

    #: Address to connect to; None means the host's own name (its key under ``hosts``).
    address: HostName | None = None
    user: NonEmptyStr | None = None
    port: Port = 22
    identity_file: NonEmptyStr | None = None
    known_hosts: NonEmptyStr | None = None


#: ``node-a:`` with no value under ``hosts`` means a host with every default.
HostEntry = Annotated[HostSpec, BeforeValidator(_empty_if_null)]


class TaskGroupSpec(BaseModel):
    """``count`` tasks of one type on one host; with a port they use ``port``, ``port+1``, ..."""

    model_config = _FROZEN

    type: Literal["chief", "worker", "evaluator"]
    host: HostName = "localhost"
    #: None: allocated at run time, which only local hosts allow.
    port: Port | None = None
    count: Annotated[int, Field(strict=True, ge=1)] = 1

    @model_validator(mode="after")
    def _group_rules(self) -> TaskGroupSpec:
        if self.type in _SINGLETON_LIMITS and self.count > 1:
            message = f"{_SINGLETON_LIMITS[self.type]}, got count {self.count}"
            raise _Problems([("count", message)])
        if self.port is not None and self.port + self.count - 1 > _MAX_PORT:
            last = self.port + self.count - 1
            raise _Problems(
                [("count", f"ports {self.port}..{last} go past {_MAX_PORT}: lower port or count")]
            )
        return self


class CheckpointSpec(BaseModel):
    """Where the chief writes its checkpoints (kept as written; may be relative)."""

    model_config = _FROZEN

    dir: NonEmptyStr


class RestartSpec(BaseModel):
    """How often the whole job is restarted after a task fails, and how long to wait between."""

    model_config = _FROZEN

    max_restarts: Annotated[int, Field(strict=True, ge=0)] = 3
    backoff_s: Annotated[float, Field(strict=True, ge=0, allow_inf_nan=False)] = 1.0
    backoff_max_s: Annotated[float, Field(strict=True, ge=0, allow_inf_nan=False)] = 30.0
    #: Give up early when this many consecutive failed attempts made no checkpoint progress
    #: (a crash loop); null turns the check off.
    crash_loop_attempts: Annotated[int, Field(strict=True, ge=1)] | None = 3

    @model_validator(mode="after")
    def _backoff_order(self) -> RestartSpec:
        if self.backoff_max_s < self.backoff_s:
            raise _Problems([("backoff_max_s", f"must be at least backoff_s ({self.backoff_s})")])
        return self


class HealthSpec(BaseModel):
    """Deadlines after which a task counts as failed to start, hung, or slow to stop."""

    model_config = _FROZEN

    #: A task that reports no training step this long after it started is stuck at start-up;
    #: null turns the check off (for scripts that never call ``worker.report``).
    startup_timeout_s: Seconds | None = 300.0
    #: A task that reported steps but no new one for this long is hung; null turns it off.
    hang_timeout_s: Seconds | None = 120.0
    #: TERM -> KILL delay when tfcluster stops tasks that may still save (Ctrl-C, preemption).
    grace_period_s: Seconds = 10.0
    #: TERM -> KILL delay for the survivors of a failed task: under MWMS they are stuck in a
    #: collective with a dead peer, cannot save anything, and often ignore TERM.
    failure_grace_period_s: Seconds = 2.0
    heartbeat_interval_s: Seconds = 1.0
    #: An agent that sends nothing (not even a heartbeat) this long is a lost host.
    heartbeat_timeout_s: Seconds = 15.0

    @model_validator(mode="after")
    def _heartbeat_order(self) -> HealthSpec:
        if self.heartbeat_timeout_s <= self.heartbeat_interval_s:
            raise _Problems([("heartbeat_timeout_s",
                              f"must be longer than heartbeat_interval_s "
                              f"({self.heartbeat_interval_s})")])
        return self


class ClusterSpec(BaseModel):
    """A whole job: what to run, where, and how to keep it healthy. Valid once constructed."""

    model_config = _FROZEN

    name: str
    entrypoint: EntrypointSpec
    #: Interpreter on each host; None: the coordinator's own on local hosts.
    python: NonEmptyStr | None = None
    workdir: NonEmptyStr = "."
    env: dict[EnvName, EnvValue] = {}
    checkpoint: CheckpointSpec | None = None
    hosts: dict[HostName, HostEntry] = {}
    tasks: Annotated[list[TaskGroupSpec], Field(min_length=1)]
    restart: RestartSpec = RestartSpec()
    health: HealthSpec = HealthSpec()

    @field_validator("name")
    @classmethod
    def _job_name(cls, value: str) -> str:
        if not _JOB_NAME.fullmatch(value):
            raise ValueError(
                "must be 1-63 lowercase letters, digits, '-' or '_', starting with a letter or "
                f"digit (got {value!r})"
            )
        return value

    @model_validator(mode="after")
    def _cluster_rules(self) -> ClusterSpec:
        problems = _cluster_problems(list(enumerate(self.tasks)), self.hosts, complete=True)
        if problems:
            raise _Problems([(p.path, p.message) for p in problems])
        chief = self._chief_host()
        if (self.checkpoint is not None and chief is not None and not self.is_local(chief)
                and not posixpath.isabs(self.checkpoint.dir)):
            raise _Problems([("checkpoint.dir", f"must be an absolute path: the chief runs on "
                              f"the remote host {chief!r}, where a relative path (or ~) would "
                              "not mean the same to every task and to tfcluster")])
        return self

    def _chief_host(self) -> str | None:
        """Host of the task that writes checkpoints: the chief, else worker 0."""
        for kind in (CHIEF, WORKER):
            for group in self.tasks:
                if group.type == kind:
                    return group.host
        return None

    def is_local(self, host: str) -> bool:
        """True if ``host`` is this machine: a local name not declared under ``hosts``."""
        return _is_local(host, self.hosts)

    def address_of(self, host: str) -> str:
        """The address to reach ``host`` at: its ``hosts`` entry's address, else the name itself."""
        declared = self.hosts.get(host)
        return declared.address if declared and declared.address else host

    def task_slots(self) -> list[TaskSlot]:
        """Every task, counts expanded, numbered per type in order of appearance."""
        return [slot for _, slot in _expand(list(enumerate(self.tasks)))]


# --- rules across task groups --------------------------------------------------------------------


def _is_local(host: str, declared: Collection[str]) -> bool:
    return host not in declared and host.lower() in LOCAL_HOSTS


def _expand(groups: Sequence[tuple[int, TaskGroupSpec]]) -> Iterator[tuple[int, TaskSlot]]:
    next_index = dict.fromkeys((CHIEF, WORKER, EVALUATOR), 0)
    for position, group in groups:
        for offset in range(group.count):
            task = TaskId(group.type, next_index[group.type])
            next_index[group.type] += 1
            port = None if group.port is None else group.port + offset
            yield position, TaskSlot(task, group.host, port)


_SINGLETON_LIMITS = {
    CHIEF: "a job has at most one chief",
    EVALUATOR: "a job has at most one evaluator (TensorFlow supports one)",
}


def _cluster_problems(
    groups: Sequence[tuple[int, TaskGroupSpec]],
    hosts: Mapping[str, HostSpec | None],
    *,
    complete: bool,
) -> list[SpecProblem]:
    """Rules that span task groups and hosts.

    ``groups`` are the valid task groups with their positions in ``tasks``; ``hosts`` maps every
    declared host name to its entry (None if the entry itself is invalid). When ``complete`` is
    False some groups were invalid and left out, so rules that need every group are skipped and
    task ids (which depend on every group) are not named.
    """
    problems: list[SpecProblem] = []
    first_of_type: dict[str, int] = {}
    for position, group in groups:
        where = f"tasks[{position}]"
        if group.type in _SINGLETON_LIMITS and group.type in first_of_type:
            first = first_of_type[group.type]
            problems.append(
                SpecProblem(
                    f"{where}.type",
                    f"{_SINGLETON_LIMITS[group.type]}; tasks[{first}] is already the {group.type}",
                )
            )
        first_of_type.setdefault(group.type, position)
        if _is_local(group.host, hosts):
            continue
        if group.host not in hosts:
            problems.append(
                SpecProblem(
                    f"{where}.host",
                    f"unknown host {group.host!r}: declare it under hosts (only "
                    f"{', '.join(LOCAL_HOSTS)} need no entry)",
                )
            )
        elif group.port is None:
            problems.append(
                SpecProblem(
                    f"{where}.port",
                    f"port required for remote host {group.host!r} (ports are allocated at run "
                    "time only on local hosts)",
                )
            )
    if complete and not ({CHIEF, WORKER} & first_of_type.keys()):
        problems.append(SpecProblem("tasks", "needs at least one chief or worker task"))
    problems.extend(_port_clashes(groups, hosts, complete=complete))
    return sorted(problems, key=lambda p: _path_order(p.path))


def _port_clashes(
    groups: Sequence[tuple[int, TaskGroupSpec]],
    hosts: Mapping[str, HostSpec | None],
    *,
    complete: bool,
) -> list[SpecProblem]:
    """One problem per pair of groups that would listen on the same host and port."""

    def machine(host: str) -> str:
        # Local names are all one machine, and so are host entries with the same address.
        declared = hosts.get(host)
        address = (declared.address if declared and declared.address else host).lower()
        return "<local>" if address in LOCAL_HOSTS else address

    owners: dict[tuple[str, int], tuple[int, TaskSlot]] = {}
    reported: set[tuple[int, int]] = set()
    problems: list[SpecProblem] = []
    for position, slot in _expand(groups):
        if slot.port is None:
            continue
        key = (machine(slot.host), slot.port)
        if key not in owners:
            owners[key] = (position, slot)
            continue
        other_position, other = owners[key]
        if (position, other_position) in reported:
            continue
        reported.add((position, other_position))
        whose = f"tasks[{other_position}]" + (f" ({other.task})" if complete else "")
        problems.append(
            SpecProblem(
                f"tasks[{position}].port",
                f"{slot.host}:{slot.port} is already used by {whose}",
            )
        )
    return problems


def _path_order(path: str) -> tuple[int, int]:
    """Sort key putting problems in the order of ``ClusterSpec``'s fields, tasks by position."""
    fields = list(ClusterSpec.model_fields)
    top = re.match(r"[^.\[]*", path)
    first = top.group(0) if top else ""
    position = re.match(r"tasks\[(\d+)\]", path)
    return (
        fields.index(first) if first in fields else len(fields),
        int(position.group(1)) if position else -1,
    )


# --- loading -------------------------------------------------------------------------------------


def load_spec(path: str | os.PathLike[str]) -> ClusterSpec:
    """Read, parse and validate the spec file at ``path``; every failure is a ``SpecError``."""
    source = os.fspath(path)
    try:
        with open(source, "rb") as file:
            raw = file.read()
    except OSError as exc:
        message = f"cannot read the spec: {exc.strerror or exc}"
        raise SpecError(source, [SpecProblem("", message)]) from None
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        message = f"not UTF-8 text (byte {exc.start})"
        raise SpecError(source, [SpecProblem("", message)]) from None
    from launcher.spec_yaml import parse_yaml

    return spec_from_dict(parse_yaml(text, source), source)


def spec_from_dict(data: object, source: str = "<spec>") -> ClusterSpec:
    """Validate already-parsed spec data (a mapping of fields); every failure is a ``SpecError``."""
    if not isinstance(data, Mapping):
        message = (
            "the spec is empty"
            if data is None
            else f"the spec must be a mapping of fields (got a {_kind(data)})"
        )
        raise SpecError(source, [SpecProblem("", message)])
    try:
        return ClusterSpec.model_validate(data)
    except ValidationError as exc:
        errors = exc.errors()
    problems = [problem for error in errors for problem in _translate(error)]
    if any(error["loc"] for error in errors):
        # Field errors stopped the cross-group rules; check what is valid so all problems show.
        problems += _partial_cluster_problems(data)
    problems = sorted(dict.fromkeys(problems), key=lambda problem: _path_order(problem.path))
    raise SpecError(source, problems) from None


def _partial_cluster_problems(data: Mapping[Any, Any]) -> list[SpecProblem]:
    raw_tasks, raw_hosts = data.get("tasks"), data.get("hosts", {})
    if not isinstance(raw_tasks, list) or not raw_tasks or not isinstance(raw_hosts, Mapping):
        return []
    groups: list[tuple[int, TaskGroupSpec]] = []
    for position, item in enumerate(raw_tasks):
        with contextlib.suppress(ValidationError):
            groups.append((position, TaskGroupSpec.model_validate(item)))
    hosts: dict[str, HostSpec | None] = {}
    for name, item in raw_hosts.items():
        try:
            hosts[str(name)] = HostSpec.model_validate(_empty_if_null(item))
        except ValidationError:
            hosts[str(name)] = None
    return _cluster_problems(groups, hosts, complete=len(groups) == len(raw_tasks))


# --- pydantic errors to problems -----------------------------------------------------------------

_TYPE_WORDS = {
    "string_type": "a string",
    "int_type": "an integer",
    "float_type": "a number",
    "bool_type": "true or false",
    "list_type": "a list",
    "dict_type": "a mapping",
    "model_type": "a mapping",
    "model_attributes_type": "a mapping",
}


def _translate(error: ErrorDetails) -> list[SpecProblem]:
    loc = list(error["loc"])
    kind, ctx, value = error["type"], error.get("ctx", {}), error["input"]
    is_key = bool(loc) and loc[-1] == "[key]"
    if is_key:
        loc.pop()
    path = _format_path(loc)
    cause = ctx.get("error")
    if isinstance(cause, _Problems):
        return [SpecProblem(_join(path, sub), message) for sub, message in cause.problems]
    if kind == "extra_forbidden":
        return [SpecProblem(path, _unknown_field(loc))]
    if kind == "missing":
        return [SpecProblem(path, "required field is missing")]
    if kind == "literal_error":
        allowed = ", ".join(re.findall(r"'([^']*)'", str(ctx.get("expected", ""))))
        return [SpecProblem(path, f"must be one of {allowed} (got {_describe(value)})")]
    if kind in _TYPE_WORDS:
        subject = "the key must be" if is_key else "must be"
        return [SpecProblem(path, f"{subject} {_TYPE_WORDS[kind]} (got {_describe(value)})")]
    bounds = {
        "greater_than": ">",
        "greater_than_equal": ">=",
        "less_than": "<",
        "less_than_equal": "<=",
    }
    if kind in bounds:
        limit = next(iter(ctx.values()))
        if isinstance(limit, float) and limit.is_integer():
            limit = int(limit)
        return [SpecProblem(path, f"must be {bounds[kind]} {limit} (got {_describe(value)})")]
    if kind in ("string_too_short", "too_short") and ctx.get("min_length") == 1:
        return [SpecProblem(path, "must not be empty")]
    if kind == "finite_number":
        return [SpecProblem(path, f"must be a finite number (got {_describe(value)})")]
    if cause is not None:
        return [SpecProblem(path, str(cause))]
    message = error["msg"]
    return [SpecProblem(path, message[:1].lower() + message[1:])]


def _format_path(loc: Sequence[int | str]) -> str:
    path = ""
    for part in loc:
        path += f"[{part}]" if isinstance(part, int) else (f".{part}" if path else str(part))
    return path


def _join(path: str, sub: str) -> str:
    return f"{path}.{sub}" if path and sub else path or sub


def _unknown_field(loc: Sequence[int | str]) -> str:
    model = _model_at(loc[:-1])
    if model is None:
        return "unknown field"
    close = difflib.get_close_matches(str(loc[-1]), list(model.model_fields), n=1)
    known = f"did you mean {close[0]!r}?" if close else "known: " + ", ".join(model.model_fields)
    return f"unknown field ({known})"


def _model_at(loc: Sequence[int | str]) -> type[BaseModel] | None:
    """The model that data at ``loc`` is validated against (list indices, dict keys skipped)."""
    model: type[BaseModel] | None = ClusterSpec
    for part in loc:
        if model is None:
            return None
        field = model.model_fields.get(part) if isinstance(part, str) else None
        if field is not None:
            model = _inner_model(field.annotation)
    return model


def _inner_model(annotation: object) -> type[BaseModel] | None:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    if typing.get_origin(annotation) in (typing.Union, types.UnionType, list, dict, Annotated):
        for arg in typing.get_args(annotation):
            found = _inner_model(arg)
            if found is not None:
                return found
    return None


def _kind(value: object) -> str:
    if isinstance(value, Mapping):
        return "mapping"
    if isinstance(value, list | tuple):
        return "list"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number"
    return "string" if isinstance(value, str) else type(value).__name__


def _describe(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return repr(value) if len(value) <= 40 else repr(value[:37] + "...")
    if isinstance(value, int | float):
        return str(value)
    return f"a {_kind(value)}"
