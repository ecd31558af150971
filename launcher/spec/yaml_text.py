"""YAML text to spec data: keys taken as written (``ON:`` is the string ``"ON"``), duplicate keys
rejected, scalars under ``env`` and ``entrypoint.args`` / ``command`` kept as their exact text,
and every YAML error turned into one :class:`~launcher.spec.errors.SpecError` with line and
column. Its own module so that a spec built from the command line (``tfcluster local``) does not
import PyYAML."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import yaml

from launcher.spec.errors import SpecError, SpecProblem


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
