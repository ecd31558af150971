"""``strategy:`` and task type ``ps``: a parameter_server job's groups, what its tasks run, and
the one-line refusals of a spec the strategy cannot run."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from launcher.plan.placement import named_placement
from launcher.plan.planner import SERVER_MODULE, plan
from launcher.spec.errors import SpecError
from launcher.spec.loading import spec_from_dict
from worker.wire.tfconfig import TaskId

PS_TASKS: list[dict[str, Any]] = [{"type": "chief"}, {"type": "worker", "count": 2}, {"type": "ps"},
            {"type": "evaluator"}]


def spec(tasks: list[dict[str, Any]], **fields: Any) -> dict[str, Any]:
    return {"name": "job", "entrypoint": {"script": "train_ps.py"}, "tasks": tasks, **fields}


def problems_of(data: dict[str, Any]) -> list[tuple[str, str]]:
    with pytest.raises(SpecError) as info:
        spec_from_dict(data, source="job.yaml")
    return [(problem.path, problem.message) for problem in info.value.problems]


def test_a_ps_task_makes_it_a_parameter_server_job() -> None:
    assert spec_from_dict(spec(PS_TASKS)).parameter_server
    assert not spec_from_dict(spec([{"type": "chief"}, {"type": "worker"}])).parameter_server
    assert spec_from_dict(spec(PS_TASKS, strategy="parameter_server")).max_workers == 3


def test_the_plan_runs_the_entrypoint_on_the_chief_and_the_server_elsewhere() -> None:
    job = spec_from_dict(spec(PS_TASKS))
    launch = plan(job, named_placement(job, local_python="python3"), attempt=0, run_dir="/r",
                  ports={TaskId(t, i): 3000 + n for n, (t, i) in enumerate(
                      [("chief", 0), ("worker", 0), ("worker", 1), ("ps", 0)])})
    argv = {str(t.task): t.argv for t in launch.tasks}
    assert argv["chief:0"][-1] == "train_ps.py" and argv["evaluator:0"][-1] == "train_ps.py"
    assert argv["worker:1"][-2:] == ("-m", SERVER_MODULE) == argv["ps:0"][-2:]
    assert dict(launch.cluster) == {"chief": ("localhost:3000",),
                                    "worker": ("localhost:3001", "localhost:3002"),
                                    "ps": ("localhost:3003",)}
    assert [str(t.task) for t in launch.tasks] == ["chief:0", "worker:0", "worker:1", "ps:0",
                                                   "evaluator:0"]


def test_a_group_may_run_its_own_entrypoint() -> None:
    job = spec_from_dict(spec([{"type": "chief"}, {"type": "worker"},
                               {"type": "ps", "entrypoint": {"module": "my.server",
                                                             "args": ["--x"]}}]))
    assert job.entrypoint_of(TaskId("ps", 0)).module == "my.server"  # type: ignore[union-attr]
    assert job.entrypoint_of(TaskId("worker", 0)) is None  # tfcluster's server
    assert job.entrypoint_of(TaskId("chief", 0)) == job.entrypoint


@pytest.mark.parametrize(("data", "expected"), [
    (spec([{"type": "chief"}, {"type": "worker"}, {"type": "ps"}],
          strategy="multi_worker_mirrored"),
     [("tasks[2].type", "a ps task needs strategy: parameter_server (a multi_worker_mirrored "
       "job all-reduces between its chief and workers and has no parameter servers)")]),
    (spec([{"type": "chief"}, {"type": "worker"}], strategy="parameter_server"),
     [("strategy", "a parameter_server job needs at least one parameter server: add a task "
       "group {type: ps}")]),
    (spec([{"type": "worker"}, {"type": "ps"}]),
     [("tasks", "a parameter_server job needs a chief: it runs the entrypoint, TensorFlow's "
       "ClusterCoordinator program")]),
    (spec([{"type": "chief"}, {"type": "ps"}]),
     [("tasks", "a parameter_server job needs at least one worker: add a task group "
       "{type: worker}")]),
    (spec([{"type": "chief"}, {"type": "worker"}, {"type": "ps"}],
          placement={"hosts": ["localhost"]}),
     [("placement", "host pools place multi_worker_mirrored jobs only: in a parameter_server "
       "job, give each task group its host")]),
    (spec(PS_TASKS, strategy="async"),
     [("strategy", "must be one of multi_worker_mirrored, parameter_server (got 'async')")]),
])
def test_what_a_strategy_refuses(data: dict[str, Any], expected: list[tuple[str, str]]) -> None:
    assert problems_of(data) == expected


@pytest.mark.parametrize("tasks", [
    "[{type: chief}, {type: ps}, {type: worker}]\nstrategy: multi_worker_mirrored",
    "[{type: chief}, {type: worker}]\nstrategy: parameter_server",
])
def test_run_refuses_in_one_line_and_starts_nothing(tmp_path: Path, tasks: str) -> None:
    spec_file = tmp_path / "job.yaml"
    spec_file.write_text(f"name: job\nentrypoint: {{command: [touch, {tmp_path}/ran]}}\n"
                         f"tasks: {tasks}\n")
    done = subprocess.run([sys.executable, "-m", "launcher", "run", str(spec_file),
                           "--run-dir", str(tmp_path / "run")],
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 2
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert "strategy" in done.stderr or "ps task" in done.stderr
    assert not (tmp_path / "ran").exists() and not (tmp_path / "run").exists()
