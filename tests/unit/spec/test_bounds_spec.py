"""Issue 7 (supervise without harm), spec side: every string that reaches an argv, an env or a path
is one a task can really be started with, and every number is bounded, so ``validate`` catches
what would otherwise crash the agent, hang or overflow later, naming the field path."""

from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Any

import pytest

from launcher.spec.errors import SpecError
from launcher.spec.limits import (
    MAX_ARG_BYTES,
    MAX_EXEC_BYTES,
    MAX_PATH_BYTES,
    MAX_RESTARTS,
    MAX_SECONDS,
    MAX_TASKS,
    MIN_HEARTBEAT_INTERVAL_S,
)
from launcher.spec.loading import MAX_SPEC_BYTES, load_spec, spec_from_dict
from launcher.spec.rules import tf_config_size
from tests.support.planning import named_planner
from worker.wire import env

REMOTE = {"node-a": {"address": "198.18.0.2"}}


def spec(**fields: Any) -> dict[str, Any]:
    base: dict[str, Any] = {"name": "job", "entrypoint": {"command": ["true"]},
                            "tasks": [{"type": "worker"}]}
    return {**base, **fields}


def remote(**host: Any) -> dict[str, Any]:
    return spec(hosts={"node-a": {"address": "198.18.0.2", **host}},
                tasks=[{"type": "worker", "host": "node-a", "port": 2222}])


def problems_of(data: dict[str, Any]) -> list[tuple[str, str]]:
    with pytest.raises(SpecError) as info:
        spec_from_dict(data, source="job.yaml")
    return [(problem.path, problem.message) for problem in info.value.problems]


# --- A: no NUL byte (nor a lone surrogate) where a program gets the string -----------------------

#: (spec with a bad string in one field, the field's path).
def string_fields(bad: str) -> list[Any]:
    return [
        pytest.param(spec(env={"FOO": f"a{bad}b"}), "env.FOO", id="env-value"),
        pytest.param(spec(entrypoint={"command": ["true"], "args": ["ok", f"a{bad}"]}),
                     "entrypoint.args[1]", id="argument"),
        pytest.param(spec(entrypoint={"command": ["tr", f"u{bad}e"]}), "entrypoint.command[1]",
                     id="command-word"),
        pytest.param(spec(entrypoint={"script": f"train{bad}.py"}), "entrypoint.script",
                     id="script"),
        pytest.param(spec(workdir=f"/tmp/{bad}"), "workdir", id="workdir"),
        pytest.param(spec(python=f"python3{bad}"), "python", id="python"),
        pytest.param(spec(checkpoint={"dir": f"/ckpt/{bad}"}), "checkpoint.dir", id="checkpoint"),
        pytest.param(remote(user=f"ro{bad}ot"), "hosts.node-a.user", id="ssh-user"),
        pytest.param(remote(identity_file=f"~/.ssh/{bad}"), "hosts.node-a.identity_file",
                     id="identity-file"),
        pytest.param(remote(known_hosts=f"~/{bad}"), "hosts.node-a.known_hosts", id="known-hosts"),
    ]


@pytest.mark.parametrize(("data", "path"), string_fields("\0"))
def test_a_nul_byte_is_rejected_with_the_field_path(data: dict[str, Any], path: str) -> None:
    assert problems_of(data) == [(path, "must not contain a NUL byte")]


@pytest.mark.parametrize(("data", "path"), string_fields("\ud800"))
def test_a_lone_surrogate_is_rejected_with_the_field_path(data: dict[str, Any], path: str) -> None:
    (where, message), = problems_of(data)
    assert where == path
    assert message.startswith("must be valid Unicode text")
    assert "U+D800" in message


def test_a_nul_in_a_module_name_is_rejected() -> None:
    assert problems_of(spec(entrypoint={"module": "train\0"})) == [
        ("entrypoint.module", "must not contain a NUL byte")]


def test_a_nul_written_as_a_yaml_escape_is_caught_by_validate(tmp_path: Path) -> None:
    path = tmp_path / "job.yaml"
    path.write_text('name: job\nentrypoint: {command: ["true"]}\nenv: {FOO: "a\\0b"}\n'
                    "tasks: [{type: worker}]\n")
    with pytest.raises(SpecError) as info:
        load_spec(path)
    assert str(info.value) == f"{path}: env.FOO: must not contain a NUL byte"


@pytest.mark.parametrize("name", ["FO=O", "A B", "", "1X", "É", "X\0"])
def test_env_names_that_cannot_be_in_an_environment_are_rejected(name: str) -> None:
    (_, message), = problems_of(spec(env={name: "v"}))
    assert "not a valid environment variable name" in message


def test_a_key_with_control_characters_is_shown_escaped_in_the_path() -> None:
    problems = problems_of(spec(hosts={"\0": {}}))
    assert ("hosts.'\\x00'", problems[0][1]) == problems[0]


def test_unicode_that_can_be_encoded_is_accepted() -> None:
    loaded = spec_from_dict(spec(env={"GREETING": "héllo wörld ✓ \u202e"},
                                 entrypoint={"command": ["echo", "データ"]}, workdir="/données"))
    assert loaded.env["GREETING"] == "héllo wörld ✓ \u202e"


# --- strings too long for execve -----------------------------------------------------------------

def test_an_argument_longer_than_linux_allows_is_rejected() -> None:
    fits = "x" * MAX_ARG_BYTES
    spec_from_dict(spec(entrypoint={"command": ["echo", fits]}))
    (path, message), = problems_of(spec(entrypoint={"command": ["echo", fits + "x"]}))
    assert path == "entrypoint.command[1]"
    assert message == (f"is {MAX_ARG_BYTES + 1} bytes long: one argument may be at most "
                       f"{MAX_ARG_BYTES} bytes on Linux")


def test_the_length_of_an_argument_counts_utf8_bytes() -> None:
    (path, _), = problems_of(spec(entrypoint={"command": ["true"], "args": ["é" * MAX_ARG_BYTES]}))
    assert path == "entrypoint.args[0]"


def test_an_env_entry_longer_than_linux_allows_is_rejected() -> None:
    name = "FOO"
    fits = "v" * (MAX_ARG_BYTES - len(name) - 1)  # FOO=vvv... is exactly the limit
    spec_from_dict(spec(env={name: fits}))
    (path, message), = problems_of(spec(env={name: fits + "v"}))
    assert path == "env.FOO"
    assert "one environment entry (NAME=value) may be at most" in message


@pytest.mark.parametrize("field", ["workdir", "python"])
def test_a_path_longer_than_path_max_is_rejected(field: str) -> None:
    spec_from_dict(spec(**{field: "/" + "d" * (MAX_PATH_BYTES - 1)}))
    (path, message), = problems_of(spec(**{field: "/" + "d" * MAX_PATH_BYTES}))
    assert path == field and f"a path may be at most {MAX_PATH_BYTES} bytes" in message


# --- B: bounded numbers --------------------------------------------------------------------------

@pytest.mark.timeout(10)
def test_a_huge_count_is_refused_at_once() -> None:
    started = time.monotonic()
    (path, message), = problems_of(spec(tasks=[{"type": "worker",
                                                "count": 100000000000000000000000}]))
    assert time.monotonic() - started < 2
    assert path == "tasks[0].count"
    assert message.startswith(f"must be at most {MAX_TASKS} (got 100000000000000000000000)")
    assert f"a job has at most {MAX_TASKS} tasks" in message


@pytest.mark.timeout(10)
def test_a_huge_count_with_a_port_is_one_problem() -> None:
    assert [p for p, _ in problems_of(spec(tasks=[{"type": "worker", "port": 2222,
                                                   "count": 10**30}]))] == ["tasks[0].count"]


def test_max_tasks_in_one_group_is_accepted() -> None:
    assert len(spec_from_dict(spec(tasks=[{"type": "worker", "count": MAX_TASKS}])).task_slots()) \
        == MAX_TASKS


@pytest.mark.timeout(10)
def test_the_total_number_of_tasks_is_bounded() -> None:
    groups = [{"type": "worker", "count": MAX_TASKS} for _ in range(1000)]
    (path, message), = problems_of(spec(tasks=groups))
    assert path == "tasks"
    assert message.startswith(f"{1000 * MAX_TASKS} tasks in all: a job has at most {MAX_TASKS}")


def test_the_total_is_checked_even_when_another_group_is_invalid() -> None:
    groups = [{"type": "worker", "count": MAX_TASKS}, {"type": "worker", "count": 1},
              {"type": "nope"}]
    paths = [p for p, _ in problems_of(spec(tasks=groups))]
    assert paths == ["tasks", "tasks[2].type"]


def test_an_integer_of_thousands_of_digits_in_yaml_is_a_spec_error(tmp_path: Path) -> None:
    path = tmp_path / "job.yaml"
    path.write_text(f"name: job\nentrypoint: {{command: [true]}}\n"
                    f"tasks: [{{type: worker, count: {'9' * 5000}}}]\n")
    with pytest.raises(SpecError) as info:
        load_spec(path)
    assert str(info.value).startswith(f"{path}: line 3, column ")
    assert "is too long" in str(info.value)


@pytest.mark.parametrize("field", ["count", "port"])
def test_a_huge_integer_is_described_not_printed(field: str) -> None:
    (path, message), = problems_of(spec(tasks=[{"type": "worker", field: 10**5000}]))
    assert path == f"tasks[0].{field}"
    assert "digits or so" in message and len(message) < 300


def test_a_huge_integer_env_value_is_a_problem_not_a_crash() -> None:
    (path, message), = problems_of(spec(env={"N": 10**5000}))
    assert path == "env.N" and "quote it" in message


DURATIONS = [("restart", "backoff_s"), ("restart", "backoff_max_s"),
             ("health", "startup_timeout_s"), ("health", "hang_timeout_s"),
             ("health", "grace_period_s"), ("health", "failure_grace_period_s"),
             ("health", "heartbeat_interval_s"), ("health", "heartbeat_timeout_s")]


@pytest.mark.parametrize(("section", "field"), DURATIONS, ids=[f for _, f in DURATIONS])
@pytest.mark.parametrize("value", [1e308, 10**30, MAX_SECONDS + 1])
def test_durations_are_bounded(section: str, field: str, value: float) -> None:
    problems = problems_of(spec(**{section: {field: value}}))
    assert (f"{section}.{field}",
            f"must be at most {MAX_SECONDS:g} seconds, i.e. 7 days (got {float(value):g})") \
        in problems


@pytest.mark.parametrize(("section", "field"), DURATIONS, ids=[f for _, f in DURATIONS])
@pytest.mark.parametrize("value", [float("nan"), float("inf"), float("-inf")])
def test_durations_must_be_finite(section: str, field: str, value: float) -> None:
    (path, message), = problems_of(spec(**{section: {field: value}}))
    assert path == f"{section}.{field}"
    assert "finite" in message or "must be >" in message


def test_a_week_is_the_longest_duration() -> None:
    loaded = spec_from_dict(spec(health={"hang_timeout_s": MAX_SECONDS},
                                 restart={"backoff_s": MAX_SECONDS, "backoff_max_s": MAX_SECONDS}))
    assert loaded.health.hang_timeout_s == MAX_SECONDS


def test_a_heartbeat_interval_too_short_to_be_useful_is_rejected() -> None:
    (path, message), = problems_of(spec(health={"heartbeat_interval_s": 1e-300}))
    assert path == "health.heartbeat_interval_s"
    assert message.startswith(f"must be at least {MIN_HEARTBEAT_INTERVAL_S:g} seconds")
    spec_from_dict(spec(health={"heartbeat_interval_s": MIN_HEARTBEAT_INTERVAL_S}))


def test_max_restarts_is_bounded_so_the_backoff_cannot_overflow() -> None:
    spec_from_dict(spec(restart={"max_restarts": MAX_RESTARTS}))
    (path, message), = problems_of(spec(restart={"max_restarts": 10**30}))
    assert path == "restart.max_restarts"
    assert message.startswith(f"must be at most {MAX_RESTARTS} (got 10")
    # the policy's backoff_s * 2**used stays a float for every allowed restart
    assert math.isfinite(MAX_SECONDS * 2.0 ** MAX_RESTARTS)


HOSTILE = [10**5000, -(10**30), 2**63, 1e308, float("nan"), float("inf"), "x" * 300_000,
           "é\u202e\0", "\ud800", {"a": [1]}, [[1]], True, None, -1, 1e-300]
FIELDS = [("name",), ("python",), ("workdir",), ("env", "FOO"), ("checkpoint", "dir"),
          ("entrypoint", "args"), ("entrypoint", "command"), ("tasks", 0, "count"),
          ("tasks", 0, "port"), ("tasks", 0, "host"), ("tasks", 0, "type"),
          ("restart", "max_restarts"), ("restart", "backoff_s"), ("restart", "crash_loop_attempts"),
          ("health", "hang_timeout_s"), ("health", "heartbeat_interval_s"), ("hosts",), ("env",),
          ("tasks",), ("entrypoint",)]


@pytest.mark.timeout(60)
@pytest.mark.parametrize("where", FIELDS, ids=[".".join(map(str, f)) for f in FIELDS])
def test_hostile_values_give_a_spec_or_a_spec_error_never_an_exception(where: tuple[Any, ...]
                                                                       ) -> None:
    for value in HOSTILE:
        data: dict[str, Any] = spec(tasks=[{"type": "worker", "count": 2}])
        target: Any = data
        for part in where[:-1]:
            target = target.setdefault(part, {}) if isinstance(part, str) else target[part]
        target[where[-1]] = [value] if where[-1] in ("args", "command") else value
        try:
            loaded = spec_from_dict(data)
        except SpecError as exc:
            problems = exc.problems
        else:
            problems = []
            assert len(loaded.task_slots()) <= MAX_TASKS
        assert all(len(str(problem)) < 1000 for problem in problems)


# --- TF_CONFIG must fit in one environment entry ---------------------------------------------------

LONG_HOST = "node-" + "a" * 55  # a 60-character host name


def many_on(host: str, count: int) -> dict[str, Any]:
    hosts = {} if host == "localhost" else {host: {}}
    return spec(hosts=hosts, tasks=[{"type": "chief", "host": host, "port": 20000},
                                    {"type": "worker", "host": host, "port": 20001,
                                     "count": count - 1}])


def test_a_tf_config_too_long_for_an_environment_entry_is_refused() -> None:
    (path, message), = problems_of(many_on(LONG_HOST, 2000))
    assert path == "tasks"
    assert message.startswith("TF_CONFIG, which lists every task's address, would be about ")
    assert f"more than the {MAX_ARG_BYTES} one environment variable may hold" in message


@pytest.mark.parametrize(("host", "count"), [("localhost", MAX_TASKS), (LONG_HOST, 1800),
                                             ("198.18.0.2", 3000)])
def test_the_tf_config_estimate_bounds_the_real_one(host: str, count: int) -> None:
    loaded = spec_from_dict(many_on(host, count))
    real = max(len(t.env[env.TF_CONFIG].encode()) + len("TF_CONFIG=")
               for t in named_planner(loaded, run_dir="/r").plan(0).tasks)
    estimate = tf_config_size(list(enumerate(loaded.tasks)), loaded.hosts)
    assert real <= estimate < real + 200
    assert real <= MAX_ARG_BYTES


def test_more_arguments_and_environment_than_a_task_can_start_with_are_refused() -> None:
    env_vars = {f"V{i}": "x" * 100_000 for i in range(11)}  # each fits, together they do not
    (path, message), = problems_of(spec(env=env_vars))
    assert path == "env"
    assert message.startswith("the tasks would start with about ")
    assert f"more than the {MAX_EXEC_BYTES} tfcluster allows" in message
    spec_from_dict(spec(env={f"V{i}": "x" * 100_000 for i in range(9)}))


@pytest.mark.timeout(10)
def test_a_spec_file_that_never_ends_is_refused(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match="not a spec: longer than 16 MiB"):
        load_spec("/dev/zero")
    huge = tmp_path / "huge.yaml"
    huge.write_bytes(b"#" * (MAX_SPEC_BYTES + 1))
    with pytest.raises(SpecError, match="longer than"):
        load_spec(huge)
