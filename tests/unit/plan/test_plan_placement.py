"""Where the planner puts an attempt's tasks: hosts (remote ones over SSH, the local address
of a multi-host job), working and checkpoint dirs, the chief's host, the ports left to allocate;
and what leaves the planner: the plan's JSON form and each host's launch message."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from launcher.backends.ssh.engine import ssh_host
from launcher.plan.placement import named_placement
from launcher.plan.planner import PlanError, plan
from launcher.spec.loading import spec_from_dict
from launcher.spec.model import ClusterSpec
from tests.support.planning import PY, by_task, make_plan, make_spec, ports_to_allocate
from worker.wire import env
from worker.wire.protocol import Launch, decode_command
from worker.wire.tfconfig import TaskId

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
