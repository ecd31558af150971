"""Supervision that never harms, for a whole job on this machine: a stranger that got an exited
task's pid is left alone at teardown, and a SIGKILLed agent's grandchildren do not outlive it."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.support import supervision as sv
from tests.support.jobs import by, fake_spec, running, write_spec
from tests.support.tiers import require


@pytest.mark.timeout(90)
def test_a_stranger_with_an_exited_tasks_pid_is_not_signalled_at_teardown(
        tmp_path: Path) -> None:
    require(os.geteuid() == 0, "forcing pid reuse through ns_last_pid needs root")
    go = tmp_path / "go"
    spec = fake_spec("reuse", entrypoint=sv.entrypoint(tmp_path, "early", sv.EARLY_EXIT, go),
                     tasks=[{"type": "worker", "count": 2}])
    job = sv.check_stranger_untouched(tmp_path, spec, go)
    assert "left behind" not in job.stderr


@pytest.mark.timeout(90)
def test_a_killed_agents_grandchildren_are_killed_and_the_job_restarts(tmp_path: Path) -> None:
    spec = fake_spec("orphans", entrypoint=sv.entrypoint(tmp_path, "gc", sv.GRANDCHILDREN,
                                                        tmp_path),
                     tasks=[{"type": "worker", "count": 2}],
                     restart={"max_restarts": 1, "backoff_s": 0.1})
    with running(["run", str(write_spec(tmp_path, spec))], tmp_path / "run", tmp_path) as job:
        sv.wait_files(tmp_path, "grandchild-0-*", 2)
        orphans = sv.grandchild_pids(tmp_path, 0)
        sv.wait_recorded(tmp_path / "run" / "agents" / "localhost.processes.json", orphans)
        agent, = sv.agent_processes(job.processes())
        agent.kill()
        assert job.wait() == 0, job.stderr  # lost host, then attempt 1 succeeds
        assert sv.alive_pids(orphans) == []
        failed = job.wait_event(by("task_failed", attempt=0))
        assert failed["kind"] == "lost_host"
        assert "left behind" in job.stderr
