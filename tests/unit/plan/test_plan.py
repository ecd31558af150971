"""The pure planner: what every task of an attempt gets (TF_CONFIG, env, argv, cwd, host)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from launcher.backends.ssh.engine import ssh_host
from launcher.plan.placement import named_placement
from launcher.plan.planner import LaunchPlan, PlanError, ResumePoint, plan
from launcher.plan.view import plan_json, plan_text
from launcher.spec.loading import spec_from_dict
from launcher.spec.model import ClusterSpec
from worker.task_context import context
from worker.wire import env
from worker.wire.protocol import Launch, decode_command
from worker.wire.tfconfig import TaskId

PY = "/opt/venv/bin/python"
RUN_DIR = "/runs/digits-1"


def make_spec(*groups: dict[str, Any], **fields: Any) -> ClusterSpec:
    data: dict[str, Any] = {
        "name": "digits",
        "entrypoint": {"module": "train", "args": ["--steps", "5"]},
        "tasks": list(groups) or [{"type": "worker", "count": 2}],
    }
    data.update(fields)
    return spec_from_dict(data)


def ports_to_allocate(spec: ClusterSpec) -> list[TaskId]:
    return named_placement(spec, local_python=PY).ports_to_allocate


def allocated(spec: ClusterSpec, first: int = 21000) -> dict[TaskId, int]:
    """What the coordinator does: consecutive fake ports for every task that needs one."""
    return {task: first + i for i, task in enumerate(ports_to_allocate(spec))}


def make_plan(spec: ClusterSpec, base_dir: str = "/base", **kwargs: Any) -> LaunchPlan:
    kwargs.setdefault("ports", allocated(spec))
    kwargs.setdefault("attempt", 0)
    placement = named_placement(spec, local_python=PY,
                                local_address=kwargs.pop("local_address", "localhost"))
    return plan(spec, placement, run_dir=RUN_DIR, base_dir=base_dir, **kwargs)


def by_task(launch_plan: LaunchPlan) -> dict[str, Any]:
    return {str(t.task): t for t in launch_plan.tasks}


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


# --- paths and hosts -----------------------------------------------------------------------------

PATH_CASES = [
    # (workdir, checkpoint dir, expected cwd, expected checkpoint dir) with base_dir /base
    pytest.param(".", "ckpt", "/base", "/base/ckpt", id="relative"),
    pytest.param("sub/dir", "runs/ckpt", "/base/sub/dir", "/base/runs/ckpt", id="nested"),
    pytest.param("/abs/work", "/abs/ckpt", "/abs/work", "/abs/ckpt", id="absolute"),
    pytest.param("../up", "./c/../d", "/up", "/base/d", id="normalised"),
    pytest.param("~/w", "~/c", os.path.expanduser("~/w"), os.path.expanduser("~/c"), id="home"),
]


@pytest.mark.parametrize(("workdir", "ckpt", "cwd", "ckpt_dir"), PATH_CASES)
def test_local_paths_resolve_against_base_dir(workdir: str, ckpt: str, cwd: str,
                                              ckpt_dir: str) -> None:
    launch_plan = make_plan(make_spec(workdir=workdir, checkpoint={"dir": ckpt}))
    assert launch_plan.checkpoint_dir == ckpt_dir
    for task in launch_plan.tasks:
        assert task.cwd == cwd
        assert task.env[env.CHECKPOINT_DIR] == ckpt_dir


def test_base_dir_is_where_relative_paths_start(tmp_path: Path) -> None:
    launch_plan = make_plan(make_spec(workdir="w", checkpoint={"dir": "c"}), base_dir=str(tmp_path))
    assert launch_plan.checkpoint_dir == str(tmp_path / "c")
    assert {t.cwd for t in launch_plan.tasks} == {str(tmp_path / "w")}


REMOTE_HOSTS = {
    "node-a": {"address": "198.18.0.2", "user": "root", "port": 2222,
               "identity_file": "~/.ssh/id_ed25519"},
    "node-b": {},
}


def remote_spec(**fields: Any) -> ClusterSpec:
    return make_spec(
        {"type": "chief", "host": "node-a", "port": 5000},
        {"type": "worker", "host": "node-b", "port": 5001, "count": 2},
        {"type": "worker", "host": "localhost"},
        hosts=REMOTE_HOSTS, workdir="jobs/digits", checkpoint={"dir": "/srv/ckpt"}, **fields,
    )


def test_remote_hosts_use_python3_their_address_and_paths_as_written() -> None:
    launch_plan = make_plan(remote_spec())
    hosts = {h.name: h for h in launch_plan.hosts}
    assert set(hosts) == {"node-a", "node-b", "localhost"}
    node_a, node_b, local = hosts["node-a"], hosts["node-b"], hosts["localhost"]
    login_a, login_b = ssh_host(remote_spec(), "node-a"), ssh_host(remote_spec(), "node-b")
    assert (node_a.local, node_a.address, node_a.python, login_a.user, login_a.ssh_port,
            login_a.identity_file) == (False, "198.18.0.2", "python3", "root", 2222,
                                       "~/.ssh/id_ed25519")
    assert (node_b.local, node_b.address, node_b.python, login_b.ssh_port) == (False, "node-b",
                                                                               "python3", 22)
    assert (local.local, local.python) == (True, PY)
    tasks = by_task(launch_plan)
    assert tasks["chief:0"].argv[0] == "python3"
    assert tasks["worker:0"].argv[0] == "python3"
    assert tasks["worker:2"].argv[0] == PY
    assert tasks["chief:0"].cwd == "jobs/digits"
    assert tasks["worker:1"].cwd == "jobs/digits"
    assert tasks["worker:2"].cwd == "/base/jobs/digits"
    # The chief is remote: its checkpoint dir is a path on node-a (absolute, as the spec requires).
    assert launch_plan.checkpoint_dir == "/srv/ckpt"
    assert {t.env[env.CHECKPOINT_DIR] for t in launch_plan.tasks} == {"/srv/ckpt"}
    assert tasks["chief:0"].tf_config.address(TaskId("chief", 0)) == "198.18.0.2:5000"
    assert tasks["chief:0"].tf_config.address(TaskId("worker", 1)) == "node-b:5002"


@pytest.mark.parametrize(
    ("groups", "hosts", "chief_host"),
    [
        pytest.param([{"type": "worker", "host": "node-b", "port": 5001},
                      {"type": "chief", "host": "node-a", "port": 5000}], REMOTE_HOSTS, "node-a",
                     id="chief"),
        pytest.param([{"type": "evaluator"}, {"type": "worker", "count": 2}], {}, "localhost",
                     id="local-worker-0"),
        pytest.param([{"type": "worker", "host": "node-b", "port": 5001},
                      {"type": "worker", "host": "localhost"}], REMOTE_HOSTS, "node-b",
                     id="remote-worker-0"),
    ],
)
def test_chief_host_is_where_checkpoints_are_written(groups: list[dict[str, Any]],
                                                     hosts: dict[str, Any], chief_host: str) -> None:
    assert make_plan(make_spec(*groups, hosts=hosts)).chief_host.name == chief_host


def test_missing_port_is_a_plan_error_naming_the_task() -> None:
    spec = make_spec({"type": "chief", "port": 5000}, {"type": "worker", "count": 2})
    with pytest.raises(PlanError, match="worker:1"):
        make_plan(spec, ports={TaskId("worker", 0): 21000})
    with pytest.raises(PlanError, match="worker:0"):
        make_plan(spec, ports={})


@pytest.mark.parametrize(
    ("groups", "hosts", "expected"),
    [
        pytest.param([{"type": "chief"}, {"type": "worker", "count": 2}, {"type": "evaluator"}], {},
                     ["chief:0", "worker:0", "worker:1"], id="evaluator-needs-none"),
        pytest.param([{"type": "chief", "port": 5000}, {"type": "worker", "count": 2}], {},
                     ["worker:0", "worker:1"], id="spec-port-needs-none"),
        pytest.param([{"type": "worker", "port": 5000, "count": 2}], {}, [], id="all-given"),
        pytest.param([{"type": "chief", "host": "node-a", "port": 5000}, {"type": "worker"}],
                     {"node-a": {}}, ["worker:0"], id="remote-has-port"),
    ],
)
def test_ports_to_allocate(groups: list[dict[str, Any]], hosts: dict[str, Any],
                           expected: list[str]) -> None:
    assert [str(t) for t in ports_to_allocate(make_spec(*groups, hosts=hosts))] == expected


# --- the JSON form and the launch messages -------------------------------------------------------


def test_to_dict_shape() -> None:
    launch_plan = make_plan(remote_spec(), attempt=2)
    data = launch_plan.to_dict()
    assert json.loads(json.dumps(data)) == data
    assert {"job", "attempt", "cluster", "hosts", "tasks"} <= set(data)
    assert (data["job"], data["attempt"]) == ("digits", 2)
    assert [t["task"] for t in data["tasks"]] == ["chief:0", "worker:0", "worker:1", "worker:2"]
    for entry in data["tasks"]:
        assert {"task", "host", "port", "tf_config", "argv", "env", "cwd"} <= set(entry)
        assert entry["tf_config"] == json.loads(entry["env"][env.TF_CONFIG])
        assert entry["tf_config"]["cluster"] == data["cluster"]
    assert {h["name"]: h["tasks"] for h in data["hosts"]} == {
        "node-a": ["chief:0"], "node-b": ["worker:0", "worker:1"], "localhost": ["worker:2"]}
    chief = data["tasks"][0]
    assert (chief["host"], chief["port"], chief["cwd"]) == ("node-a", 5000, "jobs/digits")


def test_plan_is_pure() -> None:
    spec = remote_spec()
    assert make_plan(spec).to_dict() == make_plan(spec).to_dict()


def test_launch_message_carries_the_tasks_of_that_host_only() -> None:
    spec = remote_spec(health={"heartbeat_interval_s": 0.5, "grace_period_s": 7})
    launch_plan = make_plan(spec, attempt=1)
    seen: list[str] = []
    marks: set[str | None] = set()
    for host in launch_plan.hosts:
        message = launch_plan.launch_message(host)
        assert (message.job, message.attempt) == ("digits", 1)
        assert (message.heartbeat_interval_s, message.grace_period_s) == (0.5, 7.0)
        assert [t.task for t in message.tasks] == [str(t.task) for t in host.tasks]
        for sent, task in zip(message.tasks, host.tasks, strict=True):
            assert launch_plan.host_of(task.task) == host
            assert sent.argv == list(task.argv)
            # TF_CONFIG rebuilt by the agent, and the mark of this run and host added
            assert message.process_mark is not None
            assert message.task_env(sent) == {**task.env, env.PROCESS_MARK: message.process_mark}
            assert "TF_CONFIG" not in sent.env  # the cluster travels once, not once per task
            assert sent.cwd == task.cwd
        assert decode_command(message.encode()) == message
        assert isinstance(message, Launch)
        marks.add(message.process_mark)
        seen += [t.task for t in message.tasks]
    assert sorted(seen) == sorted(str(t.task) for t in launch_plan.tasks)
    assert len(seen) == len(set(seen))
    assert len(marks) == len(launch_plan.hosts)  # one host's agent never takes another's


def test_tf_config_never_appears_in_argv() -> None:
    launch_plan = make_plan(remote_spec())
    for task in launch_plan.tasks:
        assert not any("cluster" in arg for arg in task.argv)


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


def test_local_tasks_of_a_multi_host_job_use_the_reachable_local_address() -> None:
    spec = spec_from_dict({
        "name": "mixed", "entrypoint": {"module": "train"},
        "hosts": {"node-a": {"address": "198.18.0.11"}},
        "tasks": [{"type": "chief", "host": "localhost", "port": 2222},
                  {"type": "worker", "host": "node-a", "port": 2222}]})
    launch_plan = plan(spec, named_placement(spec, local_python="python3",
                                             local_address="198.18.0.1"), attempt=0, run_dir="/r")
    assert dict(launch_plan.cluster) == {"chief": ("198.18.0.1:2222",),
                                         "worker": ("198.18.0.11:2222",)}
