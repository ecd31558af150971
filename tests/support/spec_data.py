"""Spec documents for the spec tests: a minimal valid spec with fields replaced, a spec file
written from YAML text, and the problems a spec is rejected with."""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any

import pytest

from launcher.spec.errors import SpecError
from launcher.spec.loading import spec_from_dict

NODE_A = {"node-a": {"address": "198.18.0.2"}}


def spec(**fields: Any) -> dict[str, Any]:
    """A minimal valid spec with some top-level fields replaced."""
    base: dict[str, Any] = {
        "name": "job",
        "entrypoint": {"module": "train"},
        "tasks": [{"type": "worker"}],
    }
    return {**base, **fields}


def tasks(*groups: dict[str, Any], **fields: Any) -> dict[str, Any]:
    return spec(tasks=list(groups), **fields)


def problems_of(data: object) -> list[tuple[str, str]]:
    """The (field path, message) of every problem ``data`` is rejected with (it must be)."""
    with pytest.raises(SpecError) as info:
        spec_from_dict(data, source="job.yaml")
    return [(problem.path, problem.message) for problem in info.value.problems]


def write(tmp_path: Path, text: str) -> Path:
    """``text`` (dedented) as ``spec.yaml`` in ``tmp_path``."""
    path = tmp_path / "spec.yaml"
    path.write_text(textwrap.dedent(text))
    return path
