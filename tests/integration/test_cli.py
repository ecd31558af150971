"""The CLI as a user meets it: validate, plan, help, and what the coordinator imports."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.jobs import REPO

SPECS = sorted((REPO / "cluster_specs").glob("*.yaml"))


def tfcluster(*args: str, cwd: Path = REPO) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "launcher", *args], capture_output=True,
                          text=True, cwd=cwd, timeout=60, check=False)


@pytest.mark.parametrize("spec", SPECS, ids=lambda p: p.name)
def test_example_specs_are_valid(spec: Path) -> None:
    result = tfcluster("validate", str(spec))
    assert result.returncode == 0, result.stderr
    assert "OK" in result.stdout


def test_validate_lists_every_problem_with_its_field_path(tmp_path: Path) -> None:
    spec = tmp_path / "bad.yaml"
    spec.write_text(
        "name: Bad Name\n"
        "entrypoint: {module: m, script: s.py}\n"
        "tasks:\n"
        "  - {type: chief}\n"
        "  - {type: chief}\n"
        "  - {type: worker, port: 70000}\n"
    )
    result = tfcluster("validate", str(spec))
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert any(line.startswith(f"{spec}: name:") for line in lines)
    assert any(f"{spec}: entrypoint:" in line for line in lines)
    assert any("tasks[2].port" in line for line in lines)
    assert any("chief" in line for line in lines if "tasks[1]" in line)
    assert "Traceback" not in result.stderr


def test_yaml_syntax_error_gives_line_and_column(tmp_path: Path) -> None:
    spec = tmp_path / "broken.yaml"
    spec.write_text("name: x\ntasks: [\n")
    for verb in ("validate", "run", "plan"):
        result = tfcluster(verb, str(spec), cwd=tmp_path)
        assert result.returncode == 2
        assert "line " in result.stderr and "column " in result.stderr
        assert "Traceback" not in result.stderr


def test_missing_spec_file_is_a_clear_error(tmp_path: Path) -> None:
    result = tfcluster("run", str(tmp_path / "nope.yaml"), cwd=tmp_path)
    assert result.returncode == 2
    assert "nope.yaml" in result.stderr and "Traceback" not in result.stderr


def test_plan_json_is_what_run_would_start() -> None:
    result = tfcluster("plan", "--json", str(REPO / "cluster_specs/local-chief-2workers.yaml"))
    assert result.returncode == 0, result.stderr
    plan = json.loads(result.stdout)
    tasks = {t["task"]: t for t in plan["tasks"]}
    assert set(tasks) == {"chief:0", "worker:0", "worker:1"}
    cluster = plan["cluster"]
    for name, task in tasks.items():
        assert task["tf_config"]["cluster"] == cluster
        assert json.loads(task["env"]["TF_CONFIG"]) == task["tf_config"]
        assert task["env"]["TFCLUSTER_TASK"] == name
        assert task["argv"][1:5] == ["-m", "worker.runtime.bootstrap", "-m", "worker.examples.digits"]
    ports = [t["port"] for t in tasks.values()]
    assert len(set(ports)) == 3


def test_plan_masks_secret_env_values(tmp_path: Path) -> None:
    spec = tmp_path / "secret.yaml"
    spec.write_text("name: s\nentrypoint: {command: [true]}\nenv: {WANDB_API_KEY: hunter2}\n"
                    "tasks: [{type: worker}]\n")
    for extra in ((), ("--json",)):
        result = tfcluster("plan", *extra, str(spec))
        assert result.returncode == 0, result.stderr
        assert "hunter2" not in result.stdout and "***" in result.stdout


@pytest.mark.parametrize("verb", ["", "run", "local", "plan", "validate"])
def test_help_works_for_every_verb(verb: str) -> None:
    result = tfcluster(*([verb] if verb else []), "--help")
    assert result.returncode == 0 and "usage:" in result.stdout


def test_the_coordinator_never_imports_tensorflow() -> None:
    code = ("import sys, launcher.cli.main, launcher.job.coordinator, launcher.backends.local, "
            "launcher.plan.planner, worker, worker.agent, worker.runtime.bootstrap, worker.checkpointing; "
            "bad = [m for m in sys.modules if m.split('.')[0] in ('tensorflow', 'keras')]; "
            "print(bad); sys.exit(1 if bad else 0)")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            timeout=60, check=False)
    assert result.returncode == 0, result.stdout + result.stderr


def test_checkpoint_dir_override_is_validated_with_the_spec(tmp_path: Path) -> None:
    result = tfcluster("run", str(REPO / "cluster_specs/docker-3hosts.yaml"),
                       "--checkpoint-dir", "relative/ckpt", cwd=tmp_path)
    assert result.returncode == 2
    assert "checkpoint.dir: must be an absolute path" in result.stderr
    assert "Traceback" not in result.stderr
