"""Validating cluster specs, rule by rule: each problem names its exact field path with a
friendly message (not pydantic's), from names and entrypoints to tasks, hosts, ports and health."""

from __future__ import annotations

from typing import Any

import pytest

from launcher.spec.errors import SpecError
from launcher.spec.loading import spec_from_dict
from tests.support.spec_data import NODE_A, problems_of, spec, tasks

# --- one case per rule: (spec, exact field path, part of the message) ----------------------------

RULES = [
    # name
    pytest.param(spec(name="Digits"), "name", "lowercase letters", id="name-uppercase"),
    pytest.param(spec(name="-job"), "name", "starting with a letter or digit", id="name-dash"),
    pytest.param(spec(name="a" * 64), "name", "1-63", id="name-too-long"),
    pytest.param(spec(name=""), "name", "1-63", id="name-empty"),
    pytest.param({"entrypoint": {"module": "m"}, "tasks": []}, "name", "required", id="no-name"),
    # entrypoint
    pytest.param(
        spec(entrypoint={}), "entrypoint", "give exactly one of module, script, command", id="ep-0"
    ),
    pytest.param(
        spec(entrypoint={"module": "m", "script": "s.py"}),
        "entrypoint",
        "give exactly one of module, script, command (got module and script)",
        id="ep-2",
    ),
    pytest.param(
        spec(entrypoint={"command": "python 'x"}),
        "entrypoint.command",
        "cannot split",
        id="ep-bad-quote",
    ),
    pytest.param(
        spec(entrypoint={"command": []}), "entrypoint.command", "must not be empty", id="ep-cmd-[]"
    ),
    pytest.param(
        spec(entrypoint={"module": "my-mod"}),
        "entrypoint.module",
        "not a Python module name",
        id="ep-module-name",
    ),
    pytest.param(
        spec(entrypoint={"script": "t.py", "args": "--x"}),
        "entrypoint.args",
        "must be a list",
        id="ep-args-str",
    ),
    pytest.param(spec(entrypoint="t.py"), "entrypoint", "must be a mapping", id="ep-not-map"),
    # env
    pytest.param(spec(env={"1A": "x"}), "env.1A", "not a valid environment variable", id="env-1"),
    pytest.param(spec(env={"A-B": "x"}), "env.A-B", "not a valid environment", id="env-dash"),
    pytest.param(spec(env={"TF_CONFIG": "{}"}), "env.TF_CONFIG", "set by tfcluster", id="env-tf"),
    pytest.param(
        spec(env={"TFCLUSTER_JOB": "x"}), "env.TFCLUSTER_JOB", "set by tfcluster", id="env-tfc"
    ),
    pytest.param(spec(env={"A": None}), "env.A", "must be a string (got null)", id="env-null"),
    pytest.param(spec(env={"A": [1]}), "env.A", "must be a string (got a list)", id="env-list"),
    # hosts
    pytest.param(
        tasks({"type": "worker", "host": "node_a", "port": 2222}, hosts={"node_a": {}}),
        "hosts.node_a",
        "not a valid host name",
        id="hosts-key",
    ),
    pytest.param(
        spec(hosts={"node-a": {"address": "bad host"}}),
        "hosts.node-a.address",
        "not a valid host name",
        id="hosts-address",
    ),
    pytest.param(
        spec(hosts={"node-a": {"port": 0}}), "hosts.node-a.port", "must be >= 1", id="ssh-port-0"
    ),
    pytest.param(
        spec(hosts={"node-a": {"port": 65536}}),
        "hosts.node-a.port",
        "must be <= 65535",
        id="ssh-port-big",
    ),
    pytest.param(
        spec(hosts={"node-a": {"port": "22"}}),
        "hosts.node-a.port",
        "must be an integer",
        id="ssh-port-str",
    ),
    # tasks: fields
    pytest.param(spec(tasks=[]), "tasks", "must not be empty", id="tasks-empty"),
    pytest.param({"name": "j", "entrypoint": {"module": "m"}}, "tasks", "required", id="no-tasks"),
    pytest.param(
        tasks({"type": "worker"}, {"type": "server"}),
        "tasks[1].type",
        "must be one of chief, worker, ps, evaluator (got 'server')",
        id="type",
    ),
    pytest.param(tasks({"host": "localhost"}), "tasks[0].type", "required", id="type-missing"),
    pytest.param(
        tasks({"type": "worker", "host": "bad host"}),
        "tasks[0].host",
        "not a valid host name",
        id="task-host",
    ),
    pytest.param(tasks({"type": "worker", "port": 0}), "tasks[0].port", ">= 1", id="port-0"),
    pytest.param(
        tasks({"type": "worker", "port": 65536}), "tasks[0].port", "<= 65535", id="port-big"
    ),
    pytest.param(
        tasks({"type": "worker", "port": 22.0}), "tasks[0].port", "an integer", id="port-float"
    ),
    pytest.param(tasks({"type": "worker", "count": 0}), "tasks[0].count", ">= 1", id="count-0"),
    pytest.param(
        tasks({"type": "worker", "count": True}), "tasks[0].count", "an integer", id="count-bool"
    ),
    pytest.param(
        tasks({"type": "worker", "port": 65535, "count": 2}),
        "tasks[0].count",
        "ports 65535..65536 go past 65535",
        id="ports-past-max",
    ),
    # tasks: chief / evaluator / training tasks
    pytest.param(
        tasks({"type": "chief"}, {"type": "chief"}),
        "tasks[1].type",
        "at most one chief; tasks[0] is already the chief",
        id="two-chiefs",
    ),
    pytest.param(
        tasks({"type": "chief", "count": 2}), "tasks[0].count", "at most one chief", id="chief-x2"
    ),
    pytest.param(
        tasks({"type": "worker"}, {"type": "evaluator", "count": 2}),
        "tasks[1].count",
        "at most one evaluator",
        id="evaluator-x2",
    ),
    pytest.param(
        tasks({"type": "worker"}, {"type": "evaluator"}, {"type": "evaluator"}),
        "tasks[2].type",
        "at most one evaluator (TensorFlow supports one); tasks[1] is already the evaluator",
        id="two-evaluators",
    ),
    pytest.param(
        tasks({"type": "evaluator"}),
        "tasks",
        "needs at least one chief or worker",
        id="evaluator-only",
    ),
    # tasks: hosts and ports
    pytest.param(
        tasks({"type": "worker", "host": "node-b", "port": 2222}),
        "tasks[0].host",
        "unknown host 'node-b': declare it under hosts",
        id="undeclared-host",
    ),
    pytest.param(
        tasks({"type": "worker", "host": "node-a"}, hosts=NODE_A),
        "tasks[0].port",
        "port required for remote host 'node-a'",
        id="remote-no-port",
    ),
    pytest.param(
        tasks({"type": "worker", "host": "localhost"}, hosts={"localhost": {}}),
        "tasks[0].port",
        "port required for remote host 'localhost'",
        id="declared-localhost-is-remote",
    ),
    pytest.param(
        tasks({"type": "chief", "port": 2222}, {"type": "worker", "port": 2222}),
        "tasks[1].port",
        "localhost:2222 is already used by tasks[0] (chief:0)",
        id="same-port",
    ),
    pytest.param(
        tasks({"type": "chief", "port": 2223}, {"type": "worker", "port": 2221, "count": 3}),
        "tasks[1].port",
        "localhost:2223 is already used by tasks[0] (chief:0)",
        id="same-port-by-count",
    ),
    pytest.param(
        tasks(
            {"type": "worker", "host": "localhost", "port": 2222, "count": 2},
            {"type": "worker", "host": "127.0.0.1", "port": 2223},
        ),
        "tasks[1].port",
        "127.0.0.1:2223 is already used by tasks[0] (worker:1)",
        id="same-port-local-alias",
    ),
    pytest.param(
        tasks(
            {"type": "worker", "host": "a", "port": 2222},
            {"type": "worker", "host": "b", "port": 2222},
            hosts={"a": {"address": "10.0.0.1"}, "b": {"address": "10.0.0.1"}},
        ),
        "tasks[1].port",
        "b:2222 is already used by tasks[0] (worker:0)",
        id="same-port-same-address",
    ),
    # checkpoint, workdir, python
    pytest.param(spec(checkpoint={}), "checkpoint.dir", "required", id="ckpt-no-dir"),
    pytest.param(spec(checkpoint={"dir": ""}), "checkpoint.dir", "must not be empty", id="ckpt-''"),
    pytest.param(spec(workdir=""), "workdir", "must not be empty", id="workdir-empty"),
    pytest.param(spec(python=3), "python", "must be a string (got 3)", id="python-int"),
    # restart
    pytest.param(
        spec(restart={"max_restarts": -1}), "restart.max_restarts", ">= 0", id="restarts-neg"
    ),
    pytest.param(spec(restart={"backoff_s": -1}), "restart.backoff_s", ">= 0", id="backoff-neg"),
    pytest.param(
        spec(restart={"backoff_s": 5, "backoff_max_s": 2}),
        "restart.backoff_max_s",
        "at least backoff_s",
        id="backoff-max-below",
    ),
    # health
    *[
        pytest.param(
            spec(health={field: 0}), f"health.{field}", "must be > 0 (got 0)", id=f"{field}-0"
        )
        for field in (
            "startup_timeout_s",
            "hang_timeout_s",
            "grace_period_s",
            "heartbeat_interval_s",
        )
    ],
    pytest.param(
        spec(health={"hang_timeout_s": "2m"}),
        "health.hang_timeout_s",
        "must be a number (got '2m')",
        id="health-str",
    ),
    pytest.param(
        spec(health={"hang_timeout_s": float("inf")}),
        "health.hang_timeout_s",
        "finite",
        id="health-inf",
    ),
    # unknown fields, at every level
    pytest.param(spec(nmae="x"), "nmae", "unknown field (did you mean 'name'?)", id="unknown-top"),
    pytest.param(
        tasks({"type": "worker", "prot": 2222}),
        "tasks[0].prot",
        "unknown field (did you mean 'port'?)",
        id="unknown-task",
    ),
    pytest.param(
        spec(hosts={"node-a": {"usr": "root"}}),
        "hosts.node-a.usr",
        "unknown field (did you mean 'user'?)",
        id="unknown-host",
    ),
    pytest.param(
        spec(entrypoint={"module": "m", "argv": []}),
        "entrypoint.argv",
        "unknown field",
        id="unknown-entrypoint",
    ),
    pytest.param(
        spec(health={"zzz": 1}), "health.zzz", "unknown field (known: startup_timeout_s", id="uf"
    ),
]


@pytest.mark.parametrize(("data", "path", "fragment"), RULES)
def test_rule_names_field_path(data: dict[str, Any], path: str, fragment: str) -> None:
    found = problems_of(data)
    assert any(p == path and fragment in m for p, m in found), found


@pytest.mark.parametrize(
    ("data", "path", "message"),
    [
        pytest.param(
            tasks({"type": "worker", "prot": 1}),
            "tasks[0].prot",
            "unknown field (did you mean 'port'?)",
            id="unknown",
        ),
        pytest.param(
            tasks({"type": "worker"}, {"type": "server"}),
            "tasks[1].type",
            "must be one of chief, worker, ps, evaluator (got 'server')",
            id="literal",
        ),
        pytest.param(
            spec(entrypoint={}),
            "entrypoint",
            "give exactly one of module, script, command (got none)",
            id="validator",
        ),
    ],
)
def test_messages_are_friendly_not_pydantic(data: dict[str, Any], path: str, message: str) -> None:
    assert problems_of(data) == [(path, message)]


# --- host names ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "host", ["node-a", "n1", "1node", "a.b.example.com", "10.0.0.1", "fe80::1", "NODE-A"]
)
def test_valid_host_names(host: str) -> None:
    spec_from_dict(tasks({"type": "worker", "host": host, "port": 2222}, hosts={host: {}}))


@pytest.mark.parametrize(
    "host", ["node_a", "-node", "node-", "a..b", "a b", "x" * 64, "ex\u00e4mple", ""]
)
def test_invalid_host_names(host: str) -> None:
    found = dict(problems_of(tasks({"type": "worker", "host": host, "port": 2222})))
    assert "not a valid host name" in found["tasks[0].host"]


# --- the checkpoint dir of a remote chief --------------------------------------------------------


@pytest.mark.parametrize("directory", ["ckpt", "~/ckpt", "./runs/ckpt"])
def test_a_remote_chief_needs_an_absolute_checkpoint_dir(directory: str) -> None:
    data = {"name": "r", "entrypoint": {"module": "m"}, "checkpoint": {"dir": directory},
            "hosts": {"node-a": {"address": "198.18.0.11"}},
            "tasks": [{"type": "chief", "host": "node-a", "port": 2222}]}
    with pytest.raises(SpecError) as raised:
        spec_from_dict(data)
    assert [p.path for p in raised.value.problems] == ["checkpoint.dir"]
    assert "absolute" in raised.value.problems[0].message
    data["checkpoint"] = {"dir": "/srv/ckpt"}
    assert spec_from_dict(data).checkpoint is not None
