"""The spec's JSON Schema (``tfcluster schema``), for editors that check YAML as it is typed.

It is pydantic's schema of :class:`~launcher.spec.model.ClusterSpec` (every field's type, default
and description), widened where the YAML loader accepts more than the model's Python types say:

- ``env`` values and ``entrypoint.args`` / ``command`` words: any scalar (``2``, ``1.10``,
  ``true``), since the loader keeps an unquoted scalar's exact text (launcher.spec.yaml_text);
- ``entrypoint.command``: also one string, split with ``shlex.split``;
- ``hosts.NAME``: also null (``node-a:`` with nothing after it is a host with every default).

Rules across fields (one chief, known hosts, ports used once) are ``tfcluster validate``'s: a
schema cannot say them, so a spec the schema accepts may still be refused there.
"""

from __future__ import annotations

import json
from typing import Any

from worker.wire.version import TFCLUSTER_VERSION

#: The JSON Schema dialect pydantic writes.
DIALECT = "https://json-schema.org/draft/2020-12/schema"

_SCALAR: dict[str, Any] = {"type": ["string", "number", "boolean"]}


def spec_json_schema() -> dict[str, Any]:
    """The JSON Schema of a cluster spec, as a JSON-ready dict."""
    from launcher.spec.model import ClusterSpec

    schema = ClusterSpec.model_json_schema()
    schema = {"$schema": DIALECT, **schema,
              "title": f"tfcluster cluster spec (tfcluster {TFCLUSTER_VERSION})"}
    properties = schema["properties"]
    properties["env"]["additionalProperties"] = _SCALAR
    properties["hosts"]["additionalProperties"] = {
        "anyOf": [properties["hosts"]["additionalProperties"], {"type": "null"}]}
    entrypoint = schema["$defs"]["EntrypointSpec"]["properties"]
    entrypoint["args"]["items"] = _SCALAR
    entrypoint["command"]["anyOf"] = [
        {"type": "array", "items": _SCALAR, "minItems": 1},
        {"type": "string", "minLength": 1},
        {"type": "null"},
    ]
    return schema


def spec_json_schema_text() -> str:
    """:func:`spec_json_schema` as the text ``tfcluster schema`` prints (ends with a newline)."""
    return json.dumps(spec_json_schema(), indent=2) + "\n"
