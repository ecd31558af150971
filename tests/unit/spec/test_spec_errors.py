"""How a spec's problems are reported: all of them at once, one SpecError naming each field
path, and every way a spec file can fail to load (YAML errors, unreadable files, odd documents)
as a SpecError too."""

from __future__ import annotations

import pickle
import re
from pathlib import Path

import pytest

from launcher.spec.errors import SpecError, SpecProblem
from launcher.spec.loading import load_spec
from tests.support.spec_data import problems_of, tasks, write

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

