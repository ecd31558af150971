"""``startup_concurrency``: the spec field, ``tfcluster local --startup-concurrency``, and the
launch message that carries it to every agent (worker.agent.startup_pacing paces the starts)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

from launcher.cli.main import main
from launcher.cli.parser import build_parser
from launcher.cli.verbs import local_spec_data
from launcher.spec.errors import SpecError
from launcher.spec.loading import spec_from_dict
from tests.support.planning import named_planner


def data(**fields: Any) -> dict[str, Any]:
    return {"name": "paced", "entrypoint": {"command": ["true"]},
            "tasks": [{"type": "worker", "count": 3}], **fields}


@pytest.mark.parametrize("value", [None, 0, 1, 8])
def test_the_spec_takes_a_count_zero_or_nothing(value: int | None) -> None:
    fields = {} if value is None else {"startup_concurrency": value}
    assert spec_from_dict(data(**fields), source="t").startup_concurrency == value


@pytest.mark.parametrize("value", [-1, 2.5, "2", True])
def test_anything_else_is_one_problem_naming_the_field(value: object) -> None:
    with pytest.raises(SpecError) as caught:
        spec_from_dict(data(startup_concurrency=value), source="spec.yaml")
    assert [p.path for p in caught.value.problems] == ["startup_concurrency"]


@pytest.mark.parametrize("value", [None, 0, 2])
def test_every_agent_is_sent_it(value: int | None) -> None:
    spec = spec_from_dict(data(**({} if value is None else {"startup_concurrency": value})),
                          source="t")
    plan = named_planner(spec, "/tmp/run").preview()
    assert [plan.launch_message(h).startup_concurrency for h in plan.hosts] == [value]


def test_local_passes_the_flag_into_the_spec() -> None:
    args = build_parser().parse_args(["local", "-n", "2", "--startup-concurrency", "1", "--",
                                      sys.executable, "-c", "pass"])
    assert spec_from_dict(local_spec_data(args), source="t").startup_concurrency == 1
    args = build_parser().parse_args(["local", "-n", "2", "--", "true"])
    assert "startup_concurrency" not in local_spec_data(args)


def test_a_negative_flag_is_one_line_and_starts_nothing(capsys: pytest.CaptureFixture[str],
                                                        tmp_path: Path) -> None:
    code = main(["local", "-n", "2", "--startup-concurrency", "-1", "--run-dir",
                 str(tmp_path / "run"), "--", "true"])
    lines = capsys.readouterr().err.strip().splitlines()
    assert code == 2
    assert len(lines) == 1 and "startup_concurrency" in lines[0], lines
    assert not (tmp_path / "run").exists()
