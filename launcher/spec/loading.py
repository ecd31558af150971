"""Loading a spec: a YAML file or parsed data to a validated ``ClusterSpec``, or one ``SpecError``
listing every problem.

YAML details are in :mod:`launcher.spec.yaml_text`. Relative paths (``workdir``,
``checkpoint.dir``, ``hosts.*.identity_file`` / ``known_hosts``; ``entrypoint.script`` is relative
to ``workdir``) and ``~`` are kept as written: resolving them is the planner's job, against
:func:`spec_base_dir`, the spec file's directory, as compose files do (``tfcluster local``'s spec,
which has no file: the current directory)."""

from __future__ import annotations

import contextlib
import os
import weakref
from collections.abc import Mapping
from typing import Any

from pydantic import ValidationError

from launcher.spec.errors import SpecError, SpecProblem
from launcher.spec.model import ClusterSpec, HostSpec, TaskGroupSpec, empty_if_null, path_order
from launcher.spec.rules import cluster_problems
from launcher.spec.translate import kind_of, translate

#: The most of a spec file that is read (one with every task of the largest job is ~200 KB): a
#: spec given by mistake as ``/dev/zero`` or a huge log is refused instead of read forever.
MAX_SPEC_BYTES = 16 * 1024 * 1024


def load_spec(path: str | os.PathLike[str]) -> ClusterSpec:
    """Read, parse and validate the spec file at ``path``; every failure is a ``SpecError``."""
    source = os.fspath(path)
    try:
        with open(source, "rb") as file:
            raw = file.read(MAX_SPEC_BYTES + 1)
    except OSError as exc:
        message = f"cannot read the spec: {exc.strerror or exc}"
        raise SpecError(source, [SpecProblem("", message)]) from None
    if len(raw) > MAX_SPEC_BYTES:
        message = f"not a spec: longer than {MAX_SPEC_BYTES // (1024 * 1024)} MiB"
        raise SpecError(source, [SpecProblem("", message)])
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        message = f"not UTF-8 text (byte {exc.start})"
        raise SpecError(source, [SpecProblem("", message)]) from None
    from launcher.spec.yaml_text import parse_yaml

    return located(spec_from_dict(parse_yaml(text, source), source),
                   os.path.dirname(os.path.abspath(source)))


#: Each located spec's base directory, by the spec's identity (not a field of the spec: two
#: specs that say the same are equal wherever their files are); an entry goes with its spec.
_BASE_DIRS: dict[int, str] = {}


def located(spec: ClusterSpec, base_dir: str | None) -> ClusterSpec:
    """``spec``, its relative paths starting at ``base_dir`` (an absolute directory; None: the
    current directory). Returns ``spec`` itself."""
    if base_dir is not None and id(spec) not in _BASE_DIRS:
        weakref.finalize(spec, _BASE_DIRS.pop, id(spec), None)
    if base_dir is None:
        _BASE_DIRS.pop(id(spec), None)
    else:
        _BASE_DIRS[id(spec)] = base_dir
    return spec


def spec_base_dir(spec: ClusterSpec) -> str:
    """Where the relative paths of ``spec`` start: its file's directory (not followed through
    symlinks, as a user named it), or the current directory for a spec with no file."""
    return _BASE_DIRS.get(id(spec)) or os.getcwd()


def local_path(path: str, spec: ClusterSpec) -> str:
    """A path of ``spec`` on this machine: a relative one from :func:`spec_base_dir`; an
    absolute one, or one starting with ``~``, as written."""
    if path.startswith("~") or os.path.isabs(path):
        return path
    return os.path.normpath(os.path.join(spec_base_dir(spec), path))


def spec_from_dict(data: object, source: str = "<spec>") -> ClusterSpec:
    """Validate already-parsed spec data (a mapping of fields); every failure is a ``SpecError``."""
    if not isinstance(data, Mapping):
        message = (
            "the spec is empty"
            if data is None
            else f"the spec must be a mapping of fields (got a {kind_of(data)})"
        )
        raise SpecError(source, [SpecProblem("", message)])
    try:
        return ClusterSpec.model_validate(data)
    except ValidationError as exc:
        errors = exc.errors()
    problems = [problem for error in errors for problem in translate(error)]
    if any(error["loc"] for error in errors):
        # Field errors stopped the cross-group rules; check what is valid so all problems show.
        problems += partialcluster_problems(data)
    problems = sorted(dict.fromkeys(problems), key=lambda problem: path_order(problem.path))
    raise SpecError(source, problems) from None


def partialcluster_problems(data: Mapping[Any, Any]) -> list[SpecProblem]:
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
            hosts[str(name)] = HostSpec.model_validate(empty_if_null(item))
        except ValidationError:
            hosts[str(name)] = None
    return cluster_problems(groups, hosts, complete=len(groups) == len(raw_tasks))


def relative_paths(spec: ClusterSpec) -> list[str]:
    """The fields of ``spec`` that hold a relative path (``workdir`` written as ``.`` too)."""
    def relative(path: str | None) -> bool:
        return path is not None and not path.startswith("~") and not os.path.isabs(path)

    found = [name for name, path in (
        ("workdir", spec.workdir if "workdir" in spec.model_fields_set else None),
        ("entrypoint.script", spec.entrypoint.script),
        ("checkpoint.dir", spec.checkpoint.dir if spec.checkpoint else None)) if relative(path)]
    for host, entry in spec.hosts.items():
        found += [f"hosts.{host}.{name}" for name, path in (
            ("identity_file", entry.identity_file if entry else None),
            ("known_hosts", entry.known_hosts if entry else None)) if relative(path)]
    return found


def relocatable(spec: ClusterSpec) -> dict[str, Any]:
    """``spec`` as JSON data that means the same written anywhere (a copy in a run directory):
    its relative paths on this machine made absolute from :func:`spec_base_dir` (``workdir`` when
    every task runs here; a remote host's is relative to its login directory, kept as written)."""
    data = spec.model_dump(mode="json", exclude_unset=True)
    if spec.pool is None and all(spec.is_local(slot.host) for slot in spec.task_slots()):
        data["workdir"] = local_path(spec.workdir, spec)
    if isinstance(data.get("checkpoint"), dict) and "dir" in data["checkpoint"]:
        data["checkpoint"]["dir"] = local_path(data["checkpoint"]["dir"], spec)
    for entry in (data.get("hosts") or {}).values():
        for name in ("identity_file", "known_hosts"):
            if isinstance(entry, dict) and isinstance(entry.get(name), str):
                entry[name] = local_path(entry[name], spec)
    return data
