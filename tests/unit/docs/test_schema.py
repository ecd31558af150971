"""``tfcluster schema``: a JSON Schema an editor's YAML support can use, that every example spec
of the repository passes and that catches what an editor should underline."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from launcher.spec.loading import load_spec
from tests.support.jobs import REPO

SPECS = sorted(p for p in (REPO / "cluster_specs").rglob("*.yaml") if "scenarios:" not in p.read_text())


@pytest.fixture(scope="module")
def schema() -> dict[str, Any]:
    done = subprocess.run([sys.executable, "-m", "launcher", "schema"], capture_output=True,
                          text=True, timeout=60, check=True)
    loaded: dict[str, Any] = json.loads(done.stdout)
    return loaded


def _yaml(path: Path) -> Any:
    import yaml

    return yaml.safe_load(path.read_text(encoding="utf-8"))


def test_the_schema_is_a_valid_json_schema_with_descriptions(schema: dict[str, Any]) -> None:
    jsonschema.Draft202012Validator.check_schema(schema)
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    restart = schema["$defs"]["RestartSpec"]["properties"]["max_restarts"]
    assert restart["default"] == 3 and "restart" in restart["description"].lower()
    assert schema["additionalProperties"] is False  # unknown fields are underlined


@pytest.mark.parametrize("spec", SPECS, ids=lambda p: str(p.relative_to(REPO)))
def test_every_example_spec_passes_the_schema(schema: dict[str, Any], spec: Path) -> None:
    load_spec(str(spec))  # tfcluster itself takes it
    jsonschema.validate(_yaml(spec), schema, cls=jsonschema.Draft202012Validator)


def test_what_yaml_writes_unquoted_passes_as_the_loader_takes_it(schema: dict[str, Any]) -> None:
    """Numbers in env and args, a command as one string, a host with no settings."""
    import yaml

    text = """
name: j
entrypoint: {command: "python3 train.py --lr 0.1", args: [--steps, 400, true]}
env: {TF_CPP_MIN_LOG_LEVEL: 2, FLAG: true}
hosts: {node-a:}
tasks: [{type: chief, host: node-a, port: 2222}]
"""
    jsonschema.validate(yaml.safe_load(text), schema, cls=jsonschema.Draft202012Validator)


@pytest.mark.parametrize(("change", "where"), [
    ({"restart": {"max_restart": 3}}, "max_restart"),            # a typo: unknown field
    ({"health": {"hang_timeout_s": "soon"}}, "soon"),             # a wrong type
    ({"tasks": [{"type": "master"}]}, "master"),                  # not a task type
])
def test_the_schema_underlines_what_validate_refuses(schema: dict[str, Any], change: dict[str, Any],
                                                     where: str) -> None:
    spec = {"name": "j", "entrypoint": {"module": "m"}, "tasks": [{"type": "chief"}], **change}
    with pytest.raises(jsonschema.ValidationError, match=where):
        jsonschema.validate(spec, schema, cls=jsonschema.Draft202012Validator)


def test_schema_output_file_and_a_bad_path(tmp_path: Path) -> None:
    target = tmp_path / "spec.schema.json"
    subprocess.run([sys.executable, "-m", "launcher", "schema", "-o", str(target)], check=True,
                   timeout=60)
    assert json.loads(target.read_text())["title"].startswith("tfcluster cluster spec")
    bad = subprocess.run([sys.executable, "-m", "launcher", "schema", "-o",
                          str(tmp_path / "missing" / "x.json")], check=False, capture_output=True,
                         text=True, timeout=60)
    assert bad.returncode == 2
    assert bad.stderr.count("\n") == 1 and "cannot write" in bad.stderr and "Traceback" not in bad.stderr
