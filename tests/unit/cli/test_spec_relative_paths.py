"""Relative paths in a spec start at the spec file's directory, as in compose files (and as a drill
file's ``spec:`` does), wherever tfcluster is run from: ``workdir``, ``checkpoint.dir`` (and so
``entrypoint.script``, relative to ``workdir``), ``identity_file`` / ``known_hosts``; ``validate``
says so when a spec has some. A relative ``--checkpoint-dir`` is the command line's: from the
current directory."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from launcher.backends.ssh.engine import ssh_host
from launcher.cli.main import main
from launcher.spec.loading import load_spec

SPEC = {
    "name": "rel",
    "entrypoint": {"script": "train.py"},
    "workdir": "work",
    "checkpoint": {"dir": "ckpt"},
    "hosts": {"node-a": {"address": "198.18.0.2", "identity_file": "keys/id",
                         "known_hosts": "keys/known_hosts"}},
    "tasks": [{"type": "chief"}, {"type": "worker", "count": 1}],
}


@pytest.fixture
def elsewhere(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path]:
    """A spec in ``project/``, tfcluster run from ``elsewhere/``."""
    project, cwd = tmp_path / "project", tmp_path / "elsewhere"
    (project / "work").mkdir(parents=True)
    (project / "work" / "train.py").write_text("print('hi')\n")
    cwd.mkdir()
    (project / "rel.yaml").write_text(yaml.safe_dump(SPEC))
    monkeypatch.chdir(cwd)
    return project, cwd


def test_plan_resolves_workdir_and_checkpoint_dir_against_the_spec_file(
        elsewhere: tuple[Path, Path], capsys: pytest.CaptureFixture[str]) -> None:
    project, _ = elsewhere
    assert main(["plan", "--json", "../project/rel.yaml"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["checkpoint_dir"] == str(project / "ckpt")
    assert {task["cwd"] for task in shown["tasks"]} == {str(project / "work")}


def test_ssh_key_files_resolve_against_the_spec_file(elsewhere: tuple[Path, Path]) -> None:
    project, _ = elsewhere
    login = ssh_host(load_spec("../project/rel.yaml"), "node-a")
    assert login.identity_file == str(project / "keys" / "id")
    assert login.known_hosts == str(project / "keys" / "known_hosts")


def test_validate_says_where_relative_paths_start(elsewhere: tuple[Path, Path],
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    project, _ = elsewhere
    data = {**SPEC, "hosts": {}, "tasks": [{"type": "worker", "count": 2}]}
    (project / "local.yaml").write_text(yaml.safe_dump(data))
    assert main(["validate", "../project/local.yaml"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[-1] == (f"../project/local.yaml: relative paths start at {project}, the spec "
                       "file's directory: workdir, checkpoint.dir (entrypoint.script at workdir)")
    absolute = {**data, "workdir": str(project), "checkpoint": {"dir": str(project / "c")},
                "entrypoint": {"module": "worker.examples.digits"}}
    (project / "absolute.yaml").write_text(yaml.safe_dump(absolute))
    assert main(["validate", "../project/absolute.yaml"]) == 0
    assert len(capsys.readouterr().out.splitlines()) == 1  # nothing to say


def test_a_relative_checkpoint_dir_flag_starts_here(elsewhere: tuple[Path, Path],
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    from launcher.cli.parser import build_parser
    from launcher.cli.verbs import _load_for_run
    from launcher.spec.loading import spec_base_dir

    project, cwd = elsewhere
    data = {**SPEC, "hosts": {}, "tasks": [{"type": "worker", "count": 2}]}
    (project / "local.yaml").write_text(yaml.safe_dump(data))
    args = build_parser().parse_args(["run", "../project/local.yaml", "--checkpoint-dir", "mine"])
    spec = _load_for_run(args)
    assert spec.checkpoint is not None and spec.checkpoint.dir == str(cwd / "mine")
    assert spec_base_dir(spec) == str(project)  # the workdir still starts at the spec's file
