"""Loading a spec: a YAML file or parsed data to a validated ``ClusterSpec``, or one ``SpecError``
listing every problem.

YAML details are in :mod:`launcher.spec.yaml_text`. Relative paths (``workdir``,
``checkpoint.dir``) and ``~`` are kept as written: resolving them is the planner's job."""

from __future__ import annotations

import contextlib
import os
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

    return spec_from_dict(parse_yaml(text, source), source)


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
