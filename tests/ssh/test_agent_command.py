"""The one shell string run on a remote host, and how the agent's launch is adapted to it."""

from __future__ import annotations

import shlex
import subprocess
import uuid
from pathlib import Path

import pytest

from launcher.backends.agent_command import (
    agent_command,
    explain_agent_exit,
    launch_for_agent,
    remote_path,
)
from worker.wire.module_start import START_CODE
from worker.wire.protocol import Launch, TaskLaunch

HOSTILE = ["$(touch {p})", "`touch {p}`", "; touch {p}", "x' ; touch {p} ; '", "a\"b $HOME",
           "-rf", "with space", "new\nline && touch {p}", "~/x"]


@pytest.mark.parametrize("raw", HOSTILE)
def test_every_piece_of_the_agent_command_is_one_quoted_word(raw: str, tmp_path: Path) -> None:
    value = raw.format(p=tmp_path / "pwned")
    command = agent_command(workdir=value, python=value)
    assert shlex.split(command) == ["cd", value, "&&", "exec", value, "-c", START_CODE, "-m",
                                    "worker.agent"]


@pytest.mark.parametrize("raw", HOSTILE)
def test_a_real_shell_runs_nothing_from_hostile_values(raw: str, tmp_path: Path) -> None:
    pwned = tmp_path / f"pwned-{uuid.uuid4().hex}"
    value = raw.format(p=pwned)
    subprocess.run(["sh", "-c", agent_command(workdir=str(tmp_path), python=value)],
                   capture_output=True, timeout=10, check=False)
    subprocess.run(["sh", "-c", agent_command(workdir=value, python="true")],
                   capture_output=True, timeout=10, check=False)
    assert not pwned.exists()


@pytest.mark.parametrize(("path", "expected"), [
    ("~", "."), ("~/", "."), ("~/work/repo", "work/repo"), ("/abs/dir", "/abs/dir"),
    ("rel/dir", "rel/dir"), (".", "."), ("~other/x", "~other/x"),
])
def test_remote_path_makes_home_paths_relative_to_the_login_dir(path: str, expected: str) -> None:
    assert remote_path(path) == expected


def launch(*cwds: str) -> Launch:
    return Launch(job="j", attempt=0, tasks=[
        TaskLaunch(task=f"worker:{i}", argv=["python3"], env={"K": "v"}, cwd=cwd)
        for i, cwd in enumerate(cwds)])


@pytest.mark.parametrize(("workdir", "cwd", "seen_by_agent"), [
    ("work", "work", "."),
    ("work", "~/work", "."),
    ("/srv/job", "/srv/job", "."),
    ("/srv/job", "/elsewhere", "/elsewhere"),
    ("work", "work/sub", "sub"),
])
def test_task_cwds_are_given_relative_to_the_agents_own(workdir: str, cwd: str,
                                                        seen_by_agent: str) -> None:
    adapted = launch_for_agent(launch(cwd), workdir)
    assert [t.cwd for t in adapted.tasks] == [seen_by_agent]
    assert adapted.tasks[0].env == {"K": "v"} and adapted.job == "j"


@pytest.mark.parametrize(("status", "stderr", "summary"), [
    (127, ["bash: line 1: exec: /no/python: not found"], "python not found: /no/python"),
    (1, ["bash: line 1: cd: /no/dir: No such file or directory"], "workdir missing: /no/dir"),
    (1, ["/usr/bin/python3: Error while finding module specification for 'worker.agent' "
         "(ModuleNotFoundError: No module named 'worker')"], "worker not importable"),
    (3, ["boom"], "agent exited with status 3"),
])
def test_why_an_agent_ended_before_its_hello(status: int, stderr: list[str],
                                             summary: str) -> None:
    error = explain_agent_exit("node-a", python="/no/python", workdir="/no/dir", status=status,
                               stderr_tail=stderr)
    assert error.summary == summary
    assert error.host == "node-a" and stderr[-1] in str(error)
