"""The job loop started from a resumed run directory, in memory through the fake backend: the
attempt numbers continue, the checkpoint is found before the first new attempt, the restart budget
carries over and ``summary.json`` lists every attempt (the real-process flow is in
tests/integration/test_resume.py)."""

from __future__ import annotations

import io
import json
import sys
from pathlib import Path
from typing import Any

from launcher.job.coordinator import Coordinator, JobResult
from launcher.job.resume import open_resume
from launcher.job.seams import LoopSeams
from launcher.job.state import JobState
from launcher.output.console import Console
from launcher.plan.ports import PortAllocator
from launcher.run.directory import RunDir
from launcher.run.event_log import read_events
from launcher.run.stored_spec import stored_spec
from launcher.spec.loading import spec_from_dict
from tests.support.fake_backend import FakeBackend, FakeWorld, SimClock, SimInbox, TaskScript, run_inline
from tests.support.fake_trainer import write_checkpoint
from tests.support.planning import named_planner
from worker.wire.protocol import Launch

#: What a first coordinator left before it was SIGKILLed: attempt 0 crashed (a counted restart),
#: attempt 1 ran from checkpoint 10 until the coordinator vanished.
EARLIER = [
    {"ts": 100.0, "event": "job_started", "job": "sim"},
    {"ts": 101.0, "event": "attempt_started", "attempt": 0, "resume_step": None,
     "resume_checkpoint": None, "ports": {}},
    {"ts": 102.0, "event": "task_failed", "task": "worker:0", "host": "localhost", "attempt": 0,
     "kind": "exited", "died_at": 102.0, "observed_at": 102.0, "exit_code": 3},
    {"ts": 103.0, "event": "job_restarting", "attempt": 1, "reason": "restart 1 of 1",
     "backoff_s": 0.0, "counts_against_budget": True},
    {"ts": 104.0, "event": "attempt_started", "attempt": 1, "resume_step": 10,
     "resume_checkpoint": "CKPT/ckpt-10", "ports": {}},
    {"ts": 105.0, "event": "task_progress", "attempt": 1, "task": "chief:0", "step": 25,
     "metrics": {}, "first": False},
]


def earlier_run(tmp_path: Path) -> Path:
    data = {"name": "sim", "entrypoint": {"command": ["train"]},
            "checkpoint": {"dir": str(tmp_path / "ckpt")},
            "tasks": [{"type": "chief"}, {"type": "worker", "count": 1}],
            "restart": {"max_restarts": 1, "backoff_s": 0.0}}
    run = RunDir(tmp_path / "run", stored_spec=stored_spec(spec_from_dict(data), str(tmp_path)))
    run.create()
    run.release()
    with run.events.open("a") as handle:
        for event in EARLIER:
            line = json.dumps(event).replace("CKPT", str(tmp_path / "ckpt"))
            handle.write(line + "\n")
    for step in (10, 20):  # the chief's checkpoints; 20 was written during attempt 1
        write_checkpoint(str(tmp_path / "ckpt"), step)
    return run.path


def resume(tmp_path: Path, crash: bool) -> tuple[JobResult, FakeWorld, list[dict[str, Any]]]:
    resumption = open_resume(earlier_run(tmp_path))
    clock = SimClock()
    inbox = SimInbox(clock)

    def scripts(attempt: int, task: str) -> TaskScript:
        return TaskScript(steps=5, exit_code=4 if crash and task == "chief:0" else 0)

    world = FakeWorld(clock=clock, inbox_for=lambda: inbox, scripts=scripts)
    run_dir = RunDir(resumption.run_dir, resuming=True)
    planner = named_planner(resumption.spec, run_dir=str(run_dir.path), local_python=sys.executable,
                      base_dir=resumption.base_dir)
    console = Console(out=io.StringIO(), err=io.StringIO(), colour=False)
    coordinator = Coordinator(planner, run_dir, FakeBackend(world), console,
                              start=resumption.start, seams=LoopSeams(
                                  clock=clock, new_inbox=lambda: inbox, spawn=run_inline,
                                  ports=PortAllocator(lock_dir=str(tmp_path / "ports"))))
    return coordinator.run(), world, read_events(run_dir.events)


def test_a_resumed_job_continues_numbering_and_resumes_from_the_latest_checkpoint(
        tmp_path: Path) -> None:
    result, world, events = resume(tmp_path, crash=False)

    assert result.state is JobState.SUCCEEDED
    launches = [s.message for s in world.sent if isinstance(s.message, Launch)]
    assert [launch.attempt for launch in launches] == [2]
    env = launches[0].tasks[0].env
    assert (env["TFCLUSTER_ATTEMPT"], env["TFCLUSTER_RESUME_STEP"]) == ("2", "20")
    new = [e["event"] for e in events[len(EARLIER):] if e["event"] != "task_progress"]
    assert new[:4] == ["job_started", "checkpoint_found", "job_resumed", "attempt_started"]
    resumed = next(e for e in events if e["event"] == "job_resumed")
    assert (resumed["attempt"], resumed["previous_attempt"], resumed["restarts_used"]) == (2, 1, 1)
    assert resumed["resume_step"] == 20 and resumed["counts_against_budget"] is False
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert [(a["attempt"], a["status"], a["counted_against_budget"], a["checkpoint_step"])
            for a in summary["attempts"]] == [(0, "failed", True, None),
                                              (1, "interrupted", False, 20),
                                              (2, "succeeded", False, None)]
    assert summary["started_at"] == 100.0  # the job's first start, not the resume's


def test_the_restart_used_before_the_resume_is_not_given_back(tmp_path: Path) -> None:
    result, world, events = resume(tmp_path, crash=True)

    assert result.state is JobState.FAILED and result.exit_code == 4
    assert "gave up after 1 restart(s)" in result.reason
    assert [s.message.attempt for s in world.sent if isinstance(s.message, Launch)] == [2]
    assert not [e for e in events[len(EARLIER):] if e["event"] == "job_restarting"]
