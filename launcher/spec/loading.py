"""Loading a spec: a YAML file or parsed data to a validated ``ClusterSpec``, or one ``SpecError``
listing every problem.

YAML details: keys taken as written (``ON:`` is the string ``"ON"``), duplicate keys rejected, scalars under
``env`` and ``entrypoint.args`` / ``command`` kept as their exact text, and every YAML error turned
into a :class:`~launcher.spec.model.SpecError` with line and column. Relative paths (``workdir``,
``checkpoint.dir``) and ``~`` are kept as written: resolving them is the planner's job."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Mapping, Sequence
from typing import Any

import yaml
from pydantic import ValidationError

from launcher.spec.errors import SpecError, SpecProblem
from launcher.spec.model import ClusterSpec, HostSpec, TaskGroupSpec, empty_if_null, path_order
from launcher.spec.rules import cluster_problems
from launcher.spec.translate import kind_of, translate


class _SpecLoader(yaml.SafeLoader):
    """Safe YAML with keys taken as written and duplicate keys rejected."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        self.flatten_mapping(node)
        mapping: dict[Any, Any] = {}
        first_line: dict[str, int] = {}
        for key_node, value_node in node.value:
            if not isinstance(key_node, yaml.ScalarNode):
                raise yaml.constructor.ConstructorError(
                    None, None, "a mapping key must be a plain name", key_node.start_mark
                )
            key = key_node.value
            if key in first_line:
                raise yaml.constructor.ConstructorError(
                    None,
                    None,
                    f"duplicate key {key!r} (first given on line {first_line[key]})",
                    key_node.start_mark,
                )
            first_line[key] = key_node.start_mark.line + 1
            mapping[key] = self.construct_object(value_node, deep=deep)
        return mapping

    def construct_bounded_int(self, node: yaml.ScalarNode) -> int:
        """An integer, or a YAML error at its position for one too long to convert (Python
        refuses ``int()`` of more than 4300 digits)."""
        try:
            return int(self.construct_yaml_int(node))
        except ValueError:
            raise yaml.constructor.ConstructorError(
                None, None, f"the number {node.value[:20]}... is too long", node.start_mark
            ) from None


_SpecLoader.add_constructor("tag:yaml.org,2002:int", _SpecLoader.construct_bounded_int)


#: The most of a spec file that is read (one with every task of the largest job is ~200 KB): a
#: spec given by mistake as ``/dev/zero`` or a huge log is refused instead of read forever.
MAX_SPEC_BYTES = 16 * 1024 * 1024

_STR_TAG = "tag:yaml.org,2002:str"
_RETYPED_TAGS = {f"tag:yaml.org,2002:{kind}" for kind in ("int", "float", "bool", "timestamp")}


def parse_yaml(text: str, source: str) -> object:
    try:
        loader = _SpecLoader(text)
        try:
            root = loader.get_single_node()
            if root is None:
                return None
            _keep_scalar_text(root)
            return loader.construct_document(root)
        finally:
            loader.dispose()
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        what = ", ".join(part for part in (exc.context, exc.problem) if part) or "invalid YAML"
        message = _at(mark.line, mark.column, what) if mark else what
    except yaml.reader.ReaderError as exc:
        line = text.count("\n", 0, exc.position)
        column = exc.position - (text.rfind("\n", 0, exc.position) + 1)
        message = _at(line, column, f"character #x{exc.character:04x} is not allowed in YAML")
    except yaml.YAMLError as exc:
        message = f"not valid YAML: {exc}"
    except RecursionError:
        message = "not valid YAML: nested too deeply"
    raise SpecError(source, [SpecProblem("", message)])


def _at(line: int, column: int, what: str) -> str:
    """A YAML problem at a 0-based position, as people count: ``line 3, column 5: ...``."""
    return f"line {line + 1}, column {column + 1}: {what}"


def _keep_scalar_text(root: yaml.Node) -> None:
    """Make unquoted numbers and booleans that must be strings keep their exact text."""

    def child(node: yaml.Node | None, key: str) -> yaml.Node | None:
        if isinstance(node, yaml.MappingNode):
            for key_node, value_node in node.value:
                if isinstance(key_node, yaml.ScalarNode) and key_node.value == key:
                    return value_node  # type: ignore[no-any-return]
        return None

    def retag(nodes: Sequence[yaml.Node]) -> None:
        for node in nodes:
            if isinstance(node, yaml.ScalarNode) and node.tag in _RETYPED_TAGS:
                node.tag = _STR_TAG

    env = child(root, "env")
    if isinstance(env, yaml.MappingNode):
        retag([value for _, value in env.value])
    entrypoint = child(root, "entrypoint")
    for field in ("args", "command"):
        items = child(entrypoint, field)
        if isinstance(items, yaml.SequenceNode):
            retag(items.value)


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
