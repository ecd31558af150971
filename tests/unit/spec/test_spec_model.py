"""What a valid spec loads as: the design example, task slots numbered per type, which hosts
are local and their addresses, entrypoint, env and paths kept as written, a frozen model."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from launcher.spec.loading import load_spec, spec_from_dict
from launcher.spec.model import ClusterSpec, TaskSlot
from tests.support.spec_data import NODE_A, spec, tasks, write
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


def test_spec_from_dict_returns_cluster_spec() -> None:
    assert isinstance(spec_from_dict(spec()), ClusterSpec)
