"""The spec reference: every field of :class:`~launcher.spec.model.ClusterSpec`, section by
section, with its type, default and description, read from the JSON Schema ``tfcluster schema``
prints (itself pydantic's schema of the model), so the page, the schema and the model agree."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from launcher.reference.markdown import GENERATED, code, table, text

#: How a field's place is written: ``restart.max_restarts``, ``tasks[].count``,
#: ``hosts.NAME.port``.
LIST_ITEM, MAP_ENTRY = "[]", ".NAME"


@dataclass(frozen=True)
class FieldRow:
    """One field of the spec as the reference shows it."""

    path: str
    type: str
    default: str
    description: str


@dataclass(frozen=True)
class Section:
    """The fields of one model (a def of the schema), at the first path it is found under."""

    path: str
    title: str
    description: str
    fields: tuple[FieldRow, ...]


def sections(schema: dict[str, Any]) -> list[Section]:
    """Every model of ``schema`` as a section, in the order a reader meets them."""
    defs: dict[str, Any] = schema.get("$defs", {})
    found: list[Section] = []
    placed: dict[str, str] = {}

    def walk(node: dict[str, Any], path: str, title: str) -> None:
        later = []
        required = set(node.get("required", ()))
        properties: dict[str, Any] = node.get("properties", {})
        for name, prop in properties.items():  # first: where each section is described
            for ref, suffix in _refs(prop):
                target = ref.rsplit("/", 1)[-1]
                if target in placed or "properties" not in defs[target]:
                    continue
                placed[target] = _join(path, name) + suffix
                later.append((defs[target], placed[target], target))
        rows = tuple(FieldRow(_join(path, name), type_text(prop, defs, placed),
                              default_text(prop, name in required), prop.get("description", ""))
                     for name, prop in properties.items())
        summary = " ".join(node.get("description", "").replace("``", "`").split())
        found.append(Section(path, title, summary, rows))
        for child, child_path, name in later:
            walk(child, child_path, name)

    walk(schema, "", "top level")
    return found


def _join(path: str, name: str) -> str:
    return f"{path}.{name}" if path else name


def _refs(prop: dict[str, Any]) -> Iterator[tuple[str, str]]:
    """The ``$ref``s a property leads to, with how its path grows (``[]``, ``.NAME``)."""
    if "$ref" in prop:
        yield prop["$ref"], ""
    for option in prop.get("anyOf", ()):
        yield from _refs(option)
    if isinstance(prop.get("items"), dict):
        for ref, suffix in _refs(prop["items"]):
            yield ref, LIST_ITEM + suffix
    if isinstance(prop.get("additionalProperties"), dict):
        for ref, suffix in _refs(prop["additionalProperties"]):
            yield ref, MAP_ENTRY + suffix


def type_text(prop: dict[str, Any], defs: dict[str, Any], placed: dict[str, str]) -> str:
    """A field's type in a few words: ``integer ≥ 1 or null``, ``list of string``."""
    if "$ref" in prop:
        name = prop["$ref"].rsplit("/", 1)[-1]
        target = defs.get(name, {})
        if "enum" in target:
            return " \\| ".join(code(json.dumps(v)) for v in target["enum"])
        return f"section `{placed[name]}`" if name in placed else f"section ({name})"
    if "anyOf" in prop:
        return " or ".join(type_text(option, defs, placed) for option in prop["anyOf"])
    if "enum" in prop:
        return " \\| ".join(code(json.dumps(v)) for v in prop["enum"])
    if "const" in prop:
        return code(json.dumps(prop["const"]))
    kind = prop.get("type", "any")
    kind = " or ".join(kind) if isinstance(kind, list) else kind
    if kind == "array":
        words = f"list of {type_text(prop.get('items', {}), defs, placed)}"
    elif kind == "object":
        words = f"map of name to {type_text(prop.get('additionalProperties', {}), defs, placed)}"
    else:
        words = kind
    return words + _bounds(prop)


_BOUNDS = (("minimum", "≥"), ("exclusiveMinimum", ">"), ("maximum", "≤"), ("exclusiveMaximum", "<"))


def _bounds(prop: dict[str, Any]) -> str:
    parts = [f"{sign} {prop[key]:g}" for key, sign in _BOUNDS if key in prop]
    if "minItems" in prop:
        parts.append(f"at least {prop['minItems']}")
    if "maxItems" in prop:
        parts.append(f"at most {prop['maxItems']}")
    if prop.get("minLength", 0) > 1 or "maxLength" in prop:
        parts.append(f"{prop.get('minLength', 0)}-{prop.get('maxLength', '…')} characters")
    return f" ({', '.join(parts)})" if parts else ""


def default_text(prop: dict[str, Any], required: bool) -> str:
    """``required``, the default as YAML would say it, or (for a section) ``its defaults``."""
    if required:
        return "**required**"
    if "default" not in prop:
        return "each field's default"
    return code(json.dumps(prop["default"]))


def render(schema: dict[str, Any]) -> str:
    """The spec reference page (Markdown)."""
    out = ["# Spec reference\n", GENERATED.format(source="the spec's pydantic model "
           "(`launcher/spec/`) through `tfcluster schema`"),
           "Every field a cluster spec (YAML) may hold. Unknown fields are rejected; "
           "`tfcluster validate SPEC` reports every problem at once with its field path. A field "
           "shown as `a[].b` is the `b` of every entry of the list `a`; `a.NAME.b` is the `b` of "
           "every entry of the map `a`. The same fields as JSON Schema: `tfcluster schema` (see "
           "[Editor support](../guides/editor.md)).\n"]
    for section in sections(schema):
        heading = "Top level" if not section.path else f"`{section.path}`"
        out.append(f"## {heading}\n")
        if section.description:
            out.append(text(section.description) + "\n")
        rows = [(code(row.path), row.type, row.default, text(row.description)) for row in section.fields]
        out.append(table(("Field", "Type", "Default", "Description"), rows))
    return "\n".join(out)
