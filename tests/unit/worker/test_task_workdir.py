"""A task whose workdir is missing on its host (a removed checkout, a stale resume): the agent
says so, naming the directory, rather than that the interpreter cannot be started."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from worker.agent.task_process import SpawnError, TaskProcess
from worker.wire.protocol import TaskLaunch


def test_a_missing_workdir_is_named_as_such(tmp_path: Path) -> None:
    gone = tmp_path / "gone"
    task = TaskProcess(TaskLaunch(task="worker:0", argv=[sys.executable, "-c", "pass"], env={},
                                  cwd=str(gone)))
    with pytest.raises(SpawnError) as refused:
        task.start()
    assert str(refused.value) == (f"cannot start worker:0: its workdir {gone} does not exist on "
                                  "this host (or is not a directory)")
    assert task.pid is None and task.fds == {}
