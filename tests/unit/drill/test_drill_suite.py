"""Drill files: loaded and validated like specs (every problem at once, with field paths), and told
apart from specs by their content. The suites shipped in cluster_specs/drills/ load."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from launcher.drill.faults import Action
from launcher.drill.suite import is_suite, load_suite
from launcher.spec.errors import SpecError
from tests.support.jobs import REPO

DRILLS = REPO / "cluster_specs" / "drills"


def write(tmp_path: Path, data: object) -> Path:
    spec = tmp_path / "job.yaml"
    spec.write_text((DRILLS / "fake-trainer-job.yaml").read_text())
    path = tmp_path / "suite.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


@pytest.mark.parametrize("name", ["digits.yaml", "fake-trainer.yaml"])
def test_the_shipped_suites_load(name: str) -> None:
    suite = load_suite(DRILLS / name)
    assert suite.scenarios and suite.baseline
    assert is_suite(DRILLS / name)
    assert not is_suite(suite.spec_path)


def test_the_digits_suite_covers_what_the_readme_promises() -> None:
    suite = load_suite(DRILLS / "digits.yaml")
    names = [s.name for s in suite.scenarios]
    assert names == ["kill-chief", "kill-worker", "hang", "preempt", "corrupted-checkpoint",
                     "two-in-a-row"]
    actions = {f.action for s in suite.scenarios for f in s.faults}
    assert {Action.KILL, Action.STOP, Action.TERM, Action.CORRUPT_CHECKPOINT} <= actions
    assert len(suite.scenarios[-1].faults) == 2
    assert suite.spec.health.hang_timeout_s is not None  # the hang scenario needs it


def test_a_suite_with_defaults(tmp_path: Path) -> None:
    suite = load_suite(write(tmp_path, {"spec": "job.yaml", "scenarios": [
        {"name": "one", "faults": ["kill:worker:1:at-step=3"]}]}))
    assert (suite.seed, suite.repeat, suite.baseline, suite.random_horizon) == (0, 1, False, 100)
    assert suite.spec_path == tmp_path / "job.yaml"
    assert str(suite.scenarios[0].faults[0]) == "kill:worker:1:at-step=3"


def test_every_problem_of_a_drill_file_with_its_field_path(tmp_path: Path) -> None:
    path = write(tmp_path, {
        "spec": "job.yaml", "seed": -1, "repeat": 0, "colour": "red",
        "scenarios": [
            {"name": "ok", "faults": ["kill:worker:1:at-step=3", "boom:worker:1",
                                      "kill:worker:9", "kill:chief:at-step=x"]},
            {"name": "ok", "faults": []},
            {"name": "bad name!", "faults": ["term:random"], "extra": 1},
        ]})
    with pytest.raises(SpecError) as caught:
        load_suite(path)
    lines = str(caught.value).splitlines()
    assert all(line.startswith(f"{path}: ") for line in lines)
    paths = [p.path for p in caught.value.problems]
    assert paths == ["colour", "seed", "repeat", "scenarios[0].faults[1].action",
                     "scenarios[0].faults[3].trigger", "scenarios[1].name", "scenarios[1].faults",
                     "scenarios[2].extra", "scenarios[2].name", "scenarios[0].faults[2].target"]
    assert f"{path}: scenarios[0].faults[2].target: no task 'worker:9' in the spec (tasks: " \
           "chief:0, worker:0, worker:1)" in lines


@pytest.mark.parametrize(("data", "line"), [
    ({"scenarios": [{"name": "a", "faults": ["kill:chief"]}]},
     "spec: must be the path of a spec file (relative to the drill file)"),
    ({"spec": "nowhere.yaml", "scenarios": [{"name": "a", "faults": ["kill:chief"]}]},
     "spec: no spec file"),
    ({"spec": "job.yaml", "scenarios": []}, "scenarios: must be a non-empty list"),
    ({"spec": "job.yaml", "scenarios": ["kill:chief"]}, "scenarios[0]: must be a mapping"),
])
def test_missing_parts(tmp_path: Path, data: object, line: str) -> None:
    with pytest.raises(SpecError) as caught:
        load_suite(write(tmp_path, data))
    assert line in str(caught.value)


def test_a_spec_is_not_a_suite_and_bad_yaml_is_left_to_the_spec_loader(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("scenarios: [\n")
    assert not is_suite(bad)
    assert not is_suite(tmp_path / "missing.yaml")


def test_every_run_gets_its_own_checkpoint_directory(tmp_path: Path) -> None:
    from launcher.drill.session import Plan, spec_for_run
    from launcher.spec.loading import load_spec

    spec_path = DRILLS / "fake-trainer-job.yaml"
    plan = Plan(load_spec(spec_path), spec_path, seed=0, random_horizon=10)
    scenario = spec_for_run(plan, tmp_path / "kill-1", own=False).checkpoint
    assert scenario is not None and scenario.dir == str(tmp_path / "kill-1" / "checkpoints")
    given = load_spec(spec_path).model_copy(update={"checkpoint": scenario.model_copy(
        update={"dir": str(tmp_path / "mine")})})
    plan = Plan(given, spec_path, seed=0, random_horizon=10, checkpoint_dir_given=True)
    baseline = spec_for_run(plan, tmp_path / "run" / "baseline").checkpoint
    assert baseline is not None and baseline.dir == str(tmp_path / "mine" / "baseline")
    kept = spec_for_run(plan, tmp_path / "run", own=False).checkpoint  # --checkpoint-dir as given
    assert kept is not None and kept.dir == str(tmp_path / "mine")
