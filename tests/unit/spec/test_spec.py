"""Loading and validating cluster specs: every rule names its field path, all problems at once."""

from __future__ import annotations

import pickle
import re
import textwrap
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from launcher.spec.errors import SpecError, SpecProblem
from launcher.spec.loading import load_spec, spec_from_dict
from launcher.spec.model import ClusterSpec, TaskSlot
from worker.wire.tfconfig import TaskId

DESIGN_EXAMPLE = """\
name: digits                      # job name
entrypoint:                       # exactly one of module | script | command
  module: worker.examples.digits
  args: ["--steps", "400"]
python: python3                   # interpreter on each host (local default: the coordinator's)
workdir: .                        # cwd of each task
env: {TF_CPP_MIN_LOG_LEVEL: "2"}
checkpoint: {dir: /tmp/tfcluster/digits}
hosts:                            # connection details for remote hosts; "localhost" needs none
  node-a: {address: 198.18.0.2, user: root, port: 22, identity_file: ~/.ssh/id_ed25519}
tasks:
  - {type: chief, host: localhost}            # port omitted: allocated (local hosts only)
  - {type: worker, host: localhost, count: 2}
restart: {max_restarts: 3, backoff_s: 1.0}
health: {startup_timeout_s: 300, hang_timeout_s: 120, grace_period_s: 10}
"""

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
    with pytest.raises(SpecError) as info:
        spec_from_dict(data, source="job.yaml")
    return [(problem.path, problem.message) for problem in info.value.problems]


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "spec.yaml"
    path.write_text(textwrap.dedent(text))
    return path


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


# --- what is accepted -----------------------------------------------------------------------------


def test_design_example_loads(tmp_path: Path) -> None:
    loaded = load_spec(write(tmp_path, DESIGN_EXAMPLE))
    assert loaded.name == "digits"
    assert loaded.entrypoint.module == "worker.examples.digits"
    assert loaded.entrypoint.args == ["--steps", "400"]
    assert loaded.env == {"TF_CPP_MIN_LOG_LEVEL": "2"}
    assert loaded.hosts["node-a"].identity_file == "~/.ssh/id_ed25519"  # not expanded
    assert loaded.hosts["node-a"].known_hosts is None
    assert loaded.restart.backoff_max_s == 30.0
    assert loaded.health.heartbeat_interval_s == 1.0
    assert [str(slot.task) for slot in loaded.task_slots()] == ["chief:0", "worker:0", "worker:1"]


def test_task_slots_expand_counts_and_number_per_type() -> None:
    loaded = spec_from_dict(
        tasks(
            {"type": "worker", "port": 3000, "count": 2},
            {"type": "chief", "port": 4000},
            {"type": "evaluator"},
            {"type": "worker", "host": "node-a", "port": 2222, "count": 2},
            hosts=NODE_A,
        )
    )
    assert loaded.task_slots() == [
        TaskSlot(TaskId("worker", 0), "localhost", 3000),
        TaskSlot(TaskId("worker", 1), "localhost", 3001),
        TaskSlot(TaskId("chief", 0), "localhost", 4000),
        TaskSlot(TaskId("evaluator", 0), "localhost", None),
        TaskSlot(TaskId("worker", 2), "node-a", 2222),
        TaskSlot(TaskId("worker", 3), "node-a", 2223),
    ]


def test_allocated_ports_do_not_clash() -> None:
    loaded = spec_from_dict(tasks({"type": "chief"}, {"type": "worker", "count": 3}))
    assert [slot.port for slot in loaded.task_slots()] == [None] * 4


@pytest.mark.parametrize(
    ("host", "hosts", "local"),
    [
        ("localhost", {}, True),
        ("LocalHost", {}, True),
        ("127.0.0.1", {}, True),
        ("::1", {}, True),
        ("node-a", NODE_A, False),
        ("localhost", {"localhost": {}}, False),  # declared: reached over SSH
        ("127.0.0.2", {}, False),
    ],
)
def test_is_local(host: str, hosts: dict[str, Any], local: bool) -> None:
    loaded = spec_from_dict(tasks({"type": "worker", "port": 2222}, hosts=hosts))
    assert loaded.is_local(host) is local


def test_address_of_defaults_to_host_name() -> None:
    loaded = spec_from_dict(spec(hosts={**NODE_A, "node-b": None}))
    assert loaded.address_of("node-a") == "198.18.0.2"
    assert loaded.address_of("node-b") == "node-b"
    assert loaded.hosts["node-b"].port == 22
    assert loaded.address_of("localhost") == "localhost"


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


def test_command_string_is_split_not_shelled() -> None:
    loaded = spec_from_dict(spec(entrypoint={"command": "python -c 'print(1); exit(0)' $HOME"}))
    assert loaded.entrypoint.command == ["python", "-c", "print(1); exit(0)", "$HOME"]


def test_env_numbers_and_bools_from_python_become_strings() -> None:
    loaded = spec_from_dict(spec(env={"A": 1, "B": True, "C": 0.5, "D": "x"}))
    assert loaded.env == {"A": "1", "B": "true", "C": "0.5", "D": "x"}


def test_env_and_args_keep_yaml_text(tmp_path: Path) -> None:
    loaded = load_spec(
        write(
            tmp_path,
            """\
            name: job
            entrypoint: {script: train.py, args: [--steps, 400, --lr, 0.10, --eager, yes]}
            env: {VERSION: 1.10, MODE: 010, ON: yes, FLAG: true, DAY: 2024-01-01}
            tasks: [{type: worker}]
            """,
        )
    )
    assert loaded.entrypoint.args == ["--steps", "400", "--lr", "0.10", "--eager", "yes"]
    assert loaded.env == {
        "VERSION": "1.10",
        "MODE": "010",
        "ON": "yes",
        "FLAG": "true",
        "DAY": "2024-01-01",
    }


def test_paths_are_kept_as_written() -> None:
    loaded = spec_from_dict(spec(workdir="src", checkpoint={"dir": "~/ckpt"}))
    assert loaded.workdir == "src"
    assert loaded.checkpoint is not None
    assert loaded.checkpoint.dir == "~/ckpt"


def test_spec_is_frozen() -> None:
    loaded = spec_from_dict(spec())
    with pytest.raises(ValidationError):
        loaded.name = "other"


# --- all problems at once ------------------------------------------------------------------------


def test_all_problems_are_reported_together(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        """\
        name: My Job
        entrypoint: {module: m, script: s.py}
        env: {TF_CONFIG: x}
        hosts:
          node-a: {address: 198.18.0.2, prot: 22}
        tasks:
          - {type: chief, port: 2222}
          - {type: server}
          - {type: worker, host: node-a}
          - {type: worker, port: 2221, count: 2}
          - {type: chief}
        health: {hang_timeout_s: 0}
        """,
    )
    with pytest.raises(SpecError) as info:
        load_spec(path)
    assert [problem.path for problem in info.value.problems] == [
        "name",
        "entrypoint",
        "env.TF_CONFIG",
        "hosts.node-a.prot",
        "tasks[1].type",
        "tasks[2].port",
        "tasks[3].port",
        "tasks[4].type",
        "health.hang_timeout_s",
    ]
    lines = str(info.value).splitlines()
    assert len(lines) == 9
    assert lines[0].startswith(f"{path}: name: must be")
    assert lines[6] == f"{path}: tasks[3].port: localhost:2222 is already used by tasks[0]"


def test_semantic_problems_when_structure_is_valid() -> None:
    found = problems_of(
        tasks(
            {"type": "chief", "port": 2222},
            {"type": "worker", "host": "nowhere", "port": 1},
            {"type": "worker", "port": 2222},
            {"type": "chief"},
        )
    )
    assert [path for path, _ in found] == ["tasks[1].host", "tasks[2].port", "tasks[3].type"]


def test_spec_error_format_and_pickle() -> None:
    error = SpecError("s.yaml", [SpecProblem("tasks[0].port", "bad"), SpecProblem("", "oops")])
    assert str(error) == "s.yaml: tasks[0].port: bad\ns.yaml: oops"
    copy = pickle.loads(pickle.dumps(error))
    assert (copy.source, copy.problems) == (error.source, error.problems)


# --- loading files: every failure is a SpecError -------------------------------------------------


def test_yaml_syntax_error_gives_line_and_column(tmp_path: Path) -> None:
    path = write(tmp_path, "name: job\ntasks:\n  - {type: worker\n  - {type: chief}\n")
    with pytest.raises(SpecError) as info:
        load_spec(path)
    [problem] = info.value.problems
    assert problem.path == ""
    assert re.match(r"line 4, column 5: .*expected ',' or '}'", problem.message), problem.message


@pytest.mark.parametrize(
    ("text", "message"),
    [
        pytest.param("name: a\nname: b\n", "line 2, column 1: duplicate key 'name'", id="dup-key"),
        pytest.param("name: x\x00\n", "line 1, column 8: character #x0000", id="nul"),
        pytest.param("name: 'x\n", "line 2, column 1: while scanning a quoted", id="eof"),
        pytest.param("a: *x\n", "line 1, column 4: found undefined alias", id="alias"),
        pytest.param("--- 1\n--- 2\n", "line 2, column 1: expected a single document", id="docs"),
        pytest.param("- a\n", "the spec must be a mapping of fields (got a list)", id="list"),
        pytest.param("42\n", "the spec must be a mapping of fields (got a number)", id="int"),
        pytest.param("", "the spec is empty", id="empty"),
        pytest.param("# only a comment\n", "the spec is empty", id="comment"),
        pytest.param("[" * 5000, "not valid YAML: nested too deeply", id="deep"),
    ],
)
def test_bad_yaml_is_one_problem(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "spec.yaml"
    path.write_text(text)
    with pytest.raises(SpecError) as info:
        load_spec(path)
    assert [(p.path, p.message[: len(message)]) for p in info.value.problems] == [("", message)]
    assert info.value.source == str(path)


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(SpecError) as info:
        load_spec(tmp_path / "nope.yaml")
    assert info.value.problems == [
        SpecProblem("", "cannot read the spec: No such file or directory")
    ]


def test_directory_and_binary_files(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match="cannot read the spec"):
        load_spec(tmp_path)
    binary = tmp_path / "spec.yaml"
    binary.write_bytes(b"name: \xff\xfe\n")
    with pytest.raises(SpecError, match="not UTF-8 text"):
        load_spec(binary)


@pytest.mark.parametrize(
    "text",
    [
        "tasks: 5",
        "tasks: [5]",
        "tasks: [[1]]",
        "tasks: [{type: [1]}]",
        "hosts: [a]",
        "hosts: {node-a: 5}",
        "hosts: null\ntasks: [{type: worker, host: x}]",
        "env: 5",
        "env: {? [a, b] : 1}",
        "entrypoint: null",
        "entrypoint: {command: {a: 1}}",
        "restart: []",
        "name: {a: 1}",
        "1: 2",
        "<<: {name: x}",
        "health: {hang_timeout_s: .nan}",
        "tasks: [{type: worker, port: 99999999999999999999999}]",
    ],
)
def test_odd_documents_only_raise_spec_error(tmp_path: Path, text: str) -> None:
    path = tmp_path / "spec.yaml"
    path.write_text(text + "\n")
    with pytest.raises(SpecError) as info:
        load_spec(path)
    assert info.value.problems


def test_spec_from_dict_rejects_non_mapping() -> None:
    assert problems_of(["name"]) == [("", "the spec must be a mapping of fields (got a list)")]


def test_spec_from_dict_returns_cluster_spec() -> None:
    assert isinstance(spec_from_dict(spec()), ClusterSpec)


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
