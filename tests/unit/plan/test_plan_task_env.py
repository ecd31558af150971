"""What each task of an attempt is started with: its TF_CONFIG (the same cluster for all,
its own task, one chief), the contract env and a resume point, the argv of each kind of
entrypoint; and ``tfcluster plan``'s output of them, secrets masked."""

from __future__ import annotations

import json
from typing import Any

import pytest

from launcher.plan.planner import ResumePoint
from launcher.plan.view import plan_json, plan_text
from tests.support.planning import PY, RUN_DIR, by_task, make_plan, make_spec
from worker.task_context import context
from worker.wire import env
from worker.wire.tfconfig import TaskId


def tf_config_of(task_env: Any) -> dict[str, Any]:
    return dict(json.loads(task_env[env.TF_CONFIG]))


# --- TF_CONFIG -----------------------------------------------------------------------------------

CHIEF_2_WORKERS_EVAL = (
    {"type": "chief"},
    {"type": "worker", "count": 2},
    {"type": "evaluator"},
)


def test_every_task_gets_the_same_cluster_and_its_own_task() -> None:
    spec = make_spec(*CHIEF_2_WORKERS_EVAL)
    launch_plan = make_plan(spec, ports={TaskId("chief", 0): 21000, TaskId("worker", 0): 21001,
                                         TaskId("worker", 1): 21002})
    cluster = {"chief": ["localhost:21000"], "worker": ["localhost:21001", "localhost:21002"]}
    assert launch_plan.to_dict()["cluster"] == cluster
    assert [str(t.task) for t in launch_plan.tasks] == ["chief:0", "worker:0", "worker:1",
                                                        "evaluator:0"]
    for task in launch_plan.tasks:
        config = tf_config_of(task.env)
        assert config == {"cluster": cluster,
                          "task": {"type": task.task.type, "index": task.task.index}}
        assert task.tf_config.to_dict() == config


def test_evaluator_is_outside_the_cluster_but_knows_it() -> None:
    launch_plan = make_plan(make_spec(*CHIEF_2_WORKERS_EVAL))
    evaluator = by_task(launch_plan)["evaluator:0"]
    assert evaluator.port is None
    config = tf_config_of(evaluator.env)
    assert config["task"] == {"type": "evaluator", "index": 0}
    assert set(config["cluster"]) == {"chief", "worker"}
    assert config["cluster"] == launch_plan.to_dict()["cluster"]
    assert not context(evaluator.env).is_chief


@pytest.mark.parametrize(
    ("groups", "chief"),
    [
        pytest.param(CHIEF_2_WORKERS_EVAL, "chief:0", id="chief"),
        pytest.param(({"type": "worker", "count": 3},), "worker:0", id="no-chief"),
        pytest.param(({"type": "worker", "count": 2}, {"type": "evaluator"}), "worker:0",
                     id="no-chief-with-evaluator"),
    ],
)
def test_exactly_one_task_acts_as_chief(groups: tuple[dict[str, Any], ...], chief: str) -> None:
    launch_plan = make_plan(make_spec(*groups, checkpoint={"dir": "/ckpt/digits"}))
    for task in launch_plan.tasks:
        ctx = context(task.env)
        assert task.tf_config.is_chief is (str(task.task) == chief)
        assert ctx.is_chief is (str(task.task) == chief)
        assert ctx.chief_checkpoint_dir == "/ckpt/digits"
        if str(task.task) == chief:
            assert ctx.checkpoint_dir == "/ckpt/digits"
        else:
            assert ctx.checkpoint_dir is not None
            assert ctx.checkpoint_dir.startswith("/ckpt/digits/workertemp_")


PORT_CASES = [
    pytest.param(
        [{"type": "worker", "count": 2}], {"worker:0": 23000, "worker:1": 23007},
        {"worker": ["localhost:23000", "localhost:23007"]}, id="allocated",
    ),
    pytest.param(
        [{"type": "chief", "port": 5000}, {"type": "worker", "port": 6000, "count": 3}], {},
        {"chief": ["localhost:5000"],
         "worker": ["localhost:6000", "localhost:6001", "localhost:6002"]},
        id="spec-ports-with-count",
    ),
    pytest.param(
        [{"type": "chief", "port": 5000}, {"type": "worker", "count": 2}],
        {"worker:0": 23000, "worker:1": 23001},
        {"chief": ["localhost:5000"], "worker": ["localhost:23000", "localhost:23001"]},
        id="mixed",
    ),
    pytest.param(
        [{"type": "worker", "port": 6000}], {"worker:0": 23000},
        {"worker": ["localhost:6000"]}, id="spec-port-wins",
    ),
    pytest.param(
        [{"type": "worker", "host": "127.0.0.1", "count": 2}], {"worker:0": 23000, "worker:1": 23001},
        {"worker": ["localhost:23000", "localhost:23001"]}, id="127.0.0.1-is-local",
    ),
]


@pytest.mark.parametrize(("groups", "ports", "cluster"), PORT_CASES)
def test_ports_land_in_tf_config(groups: list[dict[str, Any]], ports: dict[str, int],
                                 cluster: dict[str, list[str]]) -> None:
    spec = make_spec(*groups)
    launch_plan = make_plan(spec, ports={TaskId.parse(k): v for k, v in ports.items()})
    assert launch_plan.to_dict()["cluster"] == cluster
    for task in launch_plan.tasks:
        assert tf_config_of(task.env)["cluster"] == cluster
        assert task.tf_config.address(task.task).endswith(f":{task.port}")


def test_remote_addresses_and_ipv6_brackets() -> None:
    spec = make_spec(
        {"type": "chief", "host": "node-a", "port": 7000},
        {"type": "worker", "host": "fd00::3", "port": 7001},
        {"type": "worker", "host": "node-c", "port": 7002},
        {"type": "worker", "host": "node-d", "port": 7003},
        hosts={"node-a": {"address": "fd00::2"}, "fd00::3": {}, "node-c": {"address": "198.18.0.4"},
               "node-d": None},
    )
    launch_plan = make_plan(spec, ports={})
    assert launch_plan.to_dict()["cluster"] == {
        "chief": ["[fd00::2]:7000"],
        "worker": ["[fd00::3]:7001", "198.18.0.4:7002", "node-d:7003"],
    }


# --- env -----------------------------------------------------------------------------------------


def test_env_carries_the_contract_variables() -> None:
    spec = make_spec({"type": "chief"}, {"type": "worker"}, checkpoint={"dir": "/ckpt/digits"},
                     env={"TF_CPP_MIN_LOG_LEVEL": "2"})
    launch_plan = make_plan(spec, attempt=3)
    for task in launch_plan.tasks:
        assert task.env[env.JOB] == "digits"
        assert task.env[env.TASK] == str(task.task)
        assert task.env[env.ATTEMPT] == "3"
        assert task.env[env.RUN_DIR] == RUN_DIR
        assert task.env[env.CHECKPOINT_DIR] == "/ckpt/digits"
        assert env.TF_CONFIG in task.env
        assert task.env["TF_CPP_MIN_LOG_LEVEL"] == "2"
        assert task.env["PYTHONUNBUFFERED"] == "1"
        assert env.RESUME_CHECKPOINT not in task.env
        assert env.RESUME_STEP not in task.env
        assert all(isinstance(v, str) for v in task.env.values())


def test_resume_point_reaches_every_task() -> None:
    spec = make_spec({"type": "chief"}, {"type": "worker", "count": 2}, {"type": "evaluator"},
                     checkpoint={"dir": "/ckpt/digits"})
    resume = ResumePoint(checkpoint="/ckpt/digits/ckpt-4", step=200)
    launch_plan = make_plan(spec, attempt=1, resume=resume)
    for task in launch_plan.tasks:
        assert task.env[env.RESUME_CHECKPOINT] == "/ckpt/digits/ckpt-4"
        assert task.env[env.RESUME_STEP] == "200"
        ctx = context(task.env)
        assert (ctx.resume_checkpoint, ctx.resume_step, ctx.attempt) == ("/ckpt/digits/ckpt-4", 200, 1)
    assert launch_plan.to_dict()["resume"] == {"checkpoint": "/ckpt/digits/ckpt-4", "step": 200}


def test_resume_point_without_a_step_number() -> None:
    resume = ResumePoint(checkpoint="/ckpt/digits/model-final", step=None)
    launch_plan = make_plan(make_spec(checkpoint={"dir": "/ckpt/digits"}), attempt=1, resume=resume)
    for task in launch_plan.tasks:
        assert task.env[env.RESUME_CHECKPOINT] == "/ckpt/digits/model-final"
        assert env.RESUME_STEP not in task.env
        assert context(task.env).resume_step is None


def test_no_checkpoint_section_means_no_checkpoint_dir() -> None:
    launch_plan = make_plan(make_spec())
    assert launch_plan.checkpoint_dir is None
    assert all(env.CHECKPOINT_DIR not in t.env for t in launch_plan.tasks)


def test_spec_may_override_pythonunbuffered() -> None:
    launch_plan = make_plan(make_spec(env={"PYTHONUNBUFFERED": "0"}))
    assert {t.env["PYTHONUNBUFFERED"] for t in launch_plan.tasks} == {"0"}


# --- argv ----------------------------------------------------------------------------------------

ARGV_CASES = [
    pytest.param({"module": "pkg.train", "args": ["--steps", "5"]},
                 [PY, "-m", "worker.runtime.bootstrap", "-m", "pkg.train", "--steps", "5"], id="module"),
    pytest.param({"script": "train.py", "args": ["--lr", "0.1"]},
                 [PY, "-m", "worker.runtime.bootstrap", "train.py", "--lr", "0.1"], id="script"),
    pytest.param({"script": "train.py"}, [PY, "-m", "worker.runtime.bootstrap", "train.py"], id="no-args"),
    pytest.param({"command": "bash -c 'echo hi'", "args": ["x y"]},
                 ["bash", "-c", "echo hi", "x y"], id="command-string"),
    pytest.param({"command": ["./run.sh", "--fast"], "args": ["1"]}, ["./run.sh", "--fast", "1"],
                 id="command-list"),
]


@pytest.mark.parametrize(("entrypoint", "argv"), ARGV_CASES)
def test_argv_per_entrypoint(entrypoint: dict[str, Any], argv: list[str]) -> None:
    launch_plan = make_plan(make_spec(entrypoint=entrypoint))
    assert {tuple(t.argv) for t in launch_plan.tasks} == {tuple(argv)}


def test_spec_python_replaces_the_local_interpreter() -> None:
    launch_plan = make_plan(make_spec(python="python3.11"))
    assert {t.argv[0] for t in launch_plan.tasks} == {"python3.11"}
    assert {h.python for h in launch_plan.hosts} == {"python3.11"}


# --- tfcluster plan output -----------------------------------------------------------------------

SECRETS = {
    "HF_TOKEN": "hf-value-1a2b",
    "DB_PASSWORD": "pw-value-3c4d",
    "MY_SECRET": "secret-value-5e6f",
    "OPENAI_API_KEY": "key-value-7a8b",
    "github_token": "gh-value-9c0d",
}


@pytest.mark.parametrize("render", [plan_text, plan_json], ids=["text", "json"])
def test_plan_output_masks_secrets_and_shows_tf_config(render: Any) -> None:
    spec = make_spec({"type": "chief"}, {"type": "worker"},
                     env={**SECRETS, "LOG_LEVEL": "visible-value"})
    launch_plan = make_plan(spec)
    out = render(launch_plan)
    for value in SECRETS.values():
        assert value not in out
    assert "visible-value" in out
    assert "localhost:21000" in out and "localhost:21001" in out
    for name in SECRETS:
        assert name in out
    # The plan itself keeps the real values: only what is printed is masked.
    assert all(t.env["HF_TOKEN"] == "hf-value-1a2b" for t in launch_plan.tasks)


def test_plan_json_masks_values_but_keeps_tf_config() -> None:
    spec = make_spec({"type": "chief"}, {"type": "worker"}, env=SECRETS)
    launch_plan = make_plan(spec)
    data = json.loads(plan_json(launch_plan))
    for task in data["tasks"]:
        assert {task["env"][name] for name in SECRETS} == {"***"}
        assert json.loads(task["env"][env.TF_CONFIG]) == task["tf_config"]
        assert task["tf_config"]["cluster"] == {"chief": ["localhost:21000"],
                                                "worker": ["localhost:21001"]}


def test_plan_text_shows_each_task_tf_config() -> None:
    launch_plan = make_plan(make_spec({"type": "chief"}, {"type": "worker"}))
    out = plan_text(launch_plan)
    for task in launch_plan.tasks:
        assert f"TF_CONFIG: {task.env[env.TF_CONFIG]}" in out
        assert str(task.task) in out
