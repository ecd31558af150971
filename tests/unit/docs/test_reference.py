"""The reference pages generated from the code (launcher.reference) list everything the code
defines: every spec field of the pydantic model, every verb and flag of the parser, every env
var of worker.wire.env and every event type, compared here with the code itself."""

from __future__ import annotations

import argparse
import dataclasses
import re
import types
import typing
from collections.abc import Iterator
from typing import Any

import pytest
from pydantic import BaseModel

from launcher.cli.parser import build_parser
from launcher.reference.events_page import event_classes
from launcher.reference.pages import PAGES, reference_pages
from launcher.spec.model import ClusterSpec
from worker.wire import env


@pytest.fixture(scope="module")
def pages() -> dict[str, str]:
    return reference_pages()


def _models_in(annotation: Any) -> Iterator[tuple[type[BaseModel], str]]:
    """The models a field's annotation holds, with how the path grows (``[]``, ``.NAME``)."""
    origin = typing.get_origin(annotation)
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        yield annotation, ""
    elif origin is typing.Annotated:
        yield from _models_in(typing.get_args(annotation)[0])
    elif origin in (list, tuple):
        for inner in typing.get_args(annotation):
            for model, suffix in _models_in(inner):
                yield model, "[]" + suffix
    elif origin is dict:
        for model, suffix in _models_in(typing.get_args(annotation)[1]):
            yield model, ".NAME" + suffix
    elif origin in (typing.Union, types.UnionType):
        for inner in typing.get_args(annotation):
            yield from _models_in(inner)


def model_field_paths() -> list[str]:
    """Every field of the spec, by the first path its model is met at (breadth first)."""
    paths, seen = [], {ClusterSpec}
    queue: list[tuple[type[BaseModel], str]] = [(ClusterSpec, "")]
    while queue:
        model, prefix = queue.pop(0)
        for name, info in model.model_fields.items():
            path = f"{prefix}{name}"
            paths.append(path)
            for inner, suffix in _models_in(info.annotation):
                if inner not in seen:
                    seen.add(inner)
                    queue.append((inner, f"{path}{suffix}."))
    return paths


def test_every_spec_field_is_in_the_reference_with_its_description(pages: dict[str, str]) -> None:
    page = pages["reference/spec.md"]
    paths = model_field_paths()
    assert len(paths) > 60  # the walk found the sections, not just the top level
    missing = [path for path in paths if f"| `{path}` |" not in page]
    assert not missing, f"spec fields missing from reference/spec.md: {missing}"
    rows = {line.split(" | ")[0].strip("| `"): line for line in page.splitlines()
            if line.startswith("| `")}
    undescribed = [path for path in paths if rows[path].rstrip().endswith("|  |")]
    assert not undescribed, f"spec fields without a description (add description=): {undescribed}"
    assert "| `restart.max_restarts` | integer (≥ 0) | `3` |" in page
    assert "| `name` | string | **required** |" in page


def test_every_model_field_has_a_description() -> None:
    """What ``tfcluster schema`` shows an editor on hover: no field goes without."""
    queue: list[type[BaseModel]] = [ClusterSpec]
    seen: set[type[BaseModel]] = set()
    bare = []
    while queue:
        model = queue.pop()
        seen.add(model)
        for name, info in model.model_fields.items():
            if not info.description:
                bare.append(f"{model.__name__}.{name}")
            queue += [inner for inner, _ in _models_in(info.annotation) if inner not in seen]
    assert not bare, f"fields without description=: {bare}"


def _verbs(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(action.choices)


def test_every_verb_and_flag_is_in_the_cli_reference(pages: dict[str, str]) -> None:
    page = pages["reference/cli.md"]
    sections = dict(re.findall(r"^## tfcluster (\S+)\n(.*?)(?=^## |\Z)", page, re.M | re.S))
    verbs = _verbs(build_parser())
    assert set(sections) == set(verbs)
    assert {"run", "local", "plan", "validate", "schema", "drill", "status", "logs"} <= set(verbs)
    missing = []
    for name, sub in verbs.items():
        for action in sub._actions:
            if action.help == argparse.SUPPRESS:
                continue
            shown = action.option_strings or [action.metavar or action.dest]
            missing += [f"{name} {option}" for option in shown
                        if "`{}`".format(option.replace("|", "\\|")) not in sections[name]]
    assert not missing, f"flags missing from reference/cli.md: {missing}"
    assert "--in-child" not in page  # a hidden flag stays hidden


def test_every_env_var_and_exit_code_is_in_the_environment_reference(pages: dict[str, str]) -> None:
    page = pages["reference/environment.md"]
    names = [value for key, value in vars(env).items() if isinstance(value, str)
             and not key.startswith("_") and key != "OWN_PREFIX"
             and (value == env.TF_CONFIG or value.startswith(env.OWN_PREFIX))]
    assert len(names) >= 15
    missing = [name for name in names if f"| `{name}` |" not in page]
    assert not missing, f"env vars missing from reference/environment.md: {missing}"
    for code in (env.TF_RESTART_EXIT_CODE, env.PREEMPTION_EXIT_CODE, env.DO_NOT_RESTART_EXIT_CODE,
                 75, 2):
        assert f"`{code}`" in page or f"{code}, " in page, code


def test_every_event_type_is_in_the_events_reference_with_its_fields(pages: dict[str, str]) -> None:
    page = pages["reference/events.md"]
    classes = event_classes()
    names = {name for name, _ in classes}
    assert {"job_started", "task_failed", "job_restarting", "checkpoint_found", "fault_injected",
            "attempt_placed", "slurm_attempt", "task_restarted"} <= names
    for name, cls in classes:
        section = page.split(f"\n## {name}\n", 1)[1].split("\n## ", 1)[0]
        for field in dataclasses.fields(cls):
            if field.name != "failure":  # task_failed lists the failure's own fields
                assert f"| `{field.name}` |" in section, (name, field.name)
    failed = page.split("\n## task_failed\n", 1)[1].split("\n## ", 1)[0]
    assert "| `exit_code` |" in failed and "| `detection_latency_ms` |" in failed


def test_pages_are_the_ones_the_site_lists() -> None:
    from tests.support.jobs import REPO

    nav = (REPO / "mkdocs.yml").read_text(encoding="utf-8")
    assert all(f": {path}" in nav for path in PAGES)
