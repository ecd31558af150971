"""One agent per host for the whole job: three restarts, one agent process (and a lost one is
replaced), measured from the outside by the agents' pids in the tasks' parentage."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import psutil
import pytest

from tests.support.jobs import by, fake_spec, running, write_spec

pytestmark = pytest.mark.timeout(120)

#: Every task notes its parent (the agent that started it); worker:1 fails attempts 0-2.
NOTE_PARENT = """\
import os, sys, time
attempt, task = int(os.environ["TFCLUSTER_ATTEMPT"]), os.environ["TFCLUSTER_TASK"]
with open(os.path.join(sys.argv[1], f"parent-{attempt}-{task}"), "w") as note:
    note.write(str(os.getppid()))
if attempt < 3:
    if task == "worker:1":  # fail once worker:0 has noted its parent too
        while not os.path.exists(os.path.join(sys.argv[1], f"parent-{attempt}-worker:0")):
            time.sleep(0.01)
        sys.exit(1)
    time.sleep(60)  # stopped by tfcluster
"""


def assert_one_agent_served_four_attempts(notes: Path, events: list[dict[str, Any]]) -> None:
    assert [e["attempt"] for e in events if e["event"] == "attempt_started"] == [0, 1, 2, 3]
    parents = {note.name: int(note.read_text()) for note in notes.glob("parent-*")}
    assert len(parents) == 8
    assert len(set(parents.values())) == 1, parents  # one agent process for every attempt


def test_three_restarts_run_in_one_agent(tmp_path: Path) -> None:
    script = tmp_path / "note_parent.py"
    script.write_text(NOTE_PARENT)
    spec = fake_spec("reuse3", tasks=[{"type": "worker", "count": 2}],
                     entrypoint={"script": str(script), "args": [str(tmp_path)]},
                     restart={"max_restarts": 3, "backoff_s": 0.05})
    with running(["run", str(write_spec(tmp_path, spec))], tmp_path / "run", tmp_path) as job:
        assert job.wait() == 0, job.stderr
        events = job.events()
    assert_one_agent_served_four_attempts(tmp_path, events)
    assert not (tmp_path / "run" / "agents" / "localhost.processes.json").exists()


def test_a_lost_agent_is_replaced_for_the_next_attempt(tmp_path: Path) -> None:
    spec = fake_spec("replace", tasks=[{"type": "worker", "count": 1}],
                     args=["--steps", "400", "--step-time", "0.01"],
                     restart={"max_restarts": 1, "backoff_s": 0.05})
    with running(["run", str(write_spec(tmp_path, spec))], tmp_path / "run", tmp_path) as job:
        first = job.wait_event(by("task_started", attempt=0))
        agent = psutil.Process(first["pid"]).parent()
        assert agent is not None and "worker.agent" in " ".join(agent.cmdline())
        agent.kill()
        second = job.wait_event(by("task_started", attempt=1))
        replacement = psutil.Process(second["pid"]).parent()
        assert replacement is not None and replacement.pid != agent.pid
        assert job.wait() == 0, job.stderr
    assert job.wait_event(by("task_failed", attempt=0))["kind"] == "lost_host"
