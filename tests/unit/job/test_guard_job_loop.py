"""Issue 7 through the job loop in simulated time (fake backend, as tests/unit/job/test_job_loop.py):
exit 143 with nothing saved is counted and backed off (A), a preemption notice a task reported
keeps it outside the budget (A), a checkpoint directory held by another run refuses the job before
anything starts (B), and a run directory whose disk fills up mid-job stops every task and still
writes what it can (C)."""

from __future__ import annotations

import io
import json
import sys
from pathlib import Path
from typing import Any

import pytest

from launcher.backends.base import AgentMessage
from launcher.chief.flock_lock import FlockLockFile
from launcher.chief.lock import LOCK_NAME, Acquired, CheckpointDirInUse, HolderRecord
from launcher.job import coordinator as coordinator_module
from launcher.job.coordinator import Coordinator, JobResult
from launcher.job.seams import LoopSeams
from launcher.job.state import JobState
from launcher.output.console import Console
from launcher.plan.ports import PortAllocator
from launcher.run.directory import RunDir, RunDirError
from launcher.run.event_log import EventLog, read_events
from launcher.run.events import Event, EventType
from launcher.spec.loading import spec_from_dict
from tests.support.fake_backend import FakeBackend, FakeWorld, SimClock, SimInbox, TaskScript, run_inline
from tests.support.fake_trainer import write_checkpoint
from tests.support.planning import named_planner
from worker.wire.env import PREEMPTION_EXIT_CODE
from worker.wire.protocol import TaskReport

#: Simulated start of the job (SimClock's default); the first attempt starts here.
T0 = 1_000_000.0


class Sim:
    def __init__(self, tmp_path: Path, scripts: Any, **sections: Any) -> None:
        data: dict[str, Any] = {
            "name": "sim", "entrypoint": {"command": ["train"]},
            "tasks": [{"type": "chief", "host": "localhost"},
                      {"type": "worker", "host": "localhost", "count": 2}]}
        data.update(sections)
        self.clock = SimClock(T0)
        self.inbox = SimInbox(self.clock)
        self.world = FakeWorld(clock=self.clock, inbox_for=lambda: self.inbox, scripts=scripts)
        self.run_dir = RunDir(tmp_path / "run")
        self.err = io.StringIO()
        planner = named_planner(spec_from_dict(data), run_dir=str(self.run_dir.path),
                          local_python=sys.executable, base_dir=str(tmp_path))
        self.coordinator = Coordinator(
            planner, self.run_dir, FakeBackend(self.world),
            Console(out=io.StringIO(), err=self.err, colour=False), seams=LoopSeams(
                clock=self.clock, new_inbox=lambda: self.inbox, spawn=run_inline,
                ports=PortAllocator(lock_dir=str(tmp_path / "ports"))))

    def run(self) -> JobResult:
        return self.coordinator.run()

    def events(self, kind: str | None = None) -> list[dict[str, Any]]:
        events = read_events(self.run_dir.events)
        return [e for e in events if kind is None or e["event"] == kind]


def test_exit_143_without_checkpoints_is_counted_and_backed_off(tmp_path: Path) -> None:
    sim = Sim(tmp_path, lambda attempt, task: TaskScript(steps=0, exit_code=PREEMPTION_EXIT_CODE),
              restart={"max_restarts": 1, "backoff_s": 3.0})
    result = sim.run()
    assert result.state is JobState.FAILED
    assert result.exit_code == 143
    assert [e["attempt"] for e in sim.events("attempt_started")] == [0, 1]
    restarting, = sim.events("job_restarting")
    assert restarting["counts_against_budget"] is True and restarting["backoff_s"] == 3.0
    assert "exit 143 but no new checkpoint: counted as a failure" in restarting["reason"]
    second = sim.events("attempt_started")[1]
    assert second["ts"] - restarting["ts"] >= 3.0
    assert "gave up after 1 restart(s)" in result.reason
    assert "checkpoint it saved" not in sim.err.getvalue()


def test_exit_143_after_a_reported_preemption_is_not_counted(tmp_path: Path) -> None:
    """worker:1 reports ``preempted`` (as worker.checkpointing does on SIGTERM) just before every
    task exits 143; the job has no checkpoint dir, so the notice is the only justification."""
    def scripts(attempt: int, task: str) -> TaskScript:
        return TaskScript(steps=5, exit_code=PREEMPTION_EXIT_CODE) if attempt == 0 \
            else TaskScript(steps=3)

    sim = Sim(tmp_path, scripts, restart={"max_restarts": 0, "backoff_s": 3.0})
    sim.inbox.at(T0 + 0.55, AgentMessage("localhost", TaskReport(
        task="worker:1", kind="preempted", ts=T0 + 0.55, data={"step": 5}), T0 + 0.55))
    result = sim.run()
    assert result.state is JobState.SUCCEEDED, result.reason
    restarting, = sim.events("job_restarting")
    assert restarting["counts_against_budget"] is False and restarting["backoff_s"] == 0.0
    assert "worker:1 reported a preemption" in restarting["reason"]
    assert "from the beginning (no checkpoint)" in restarting["reason"]
    assert result.attempts[0].preemption_notice == "worker:1 reported a preemption"


def test_exit_143_after_a_newer_checkpoint_is_not_counted(tmp_path: Path) -> None:
    ckpt = tmp_path / "ckpt"

    def scripts(attempt: int, task: str) -> TaskScript:
        if attempt == 0:
            write_checkpoint(str(ckpt), 5)  # the chief saved on its way out
            return TaskScript(steps=5, exit_code=PREEMPTION_EXIT_CODE)
        return TaskScript(steps=3)

    sim = Sim(tmp_path, scripts, restart={"max_restarts": 0}, checkpoint={"dir": str(ckpt)})
    result = sim.run()
    assert result.state is JobState.SUCCEEDED, result.reason
    restarting, = sim.events("job_restarting")
    assert restarting["counts_against_budget"] is False
    assert "resuming from the checkpoint it saved (step 5" in restarting["reason"]
    assert restarting["resume_step"] == 5


# --- B: the checkpoint directory -------------------------------------------------------------


def test_a_checkpoint_dir_held_by_another_run_refuses_the_job_before_anything_starts(
        tmp_path: Path) -> None:
    ckpt = tmp_path / "ckpt"
    other = FlockLockFile(str(ckpt))
    holder = HolderRecord(host="node-a", pid=4242, started=1.0, job="digits",
                          run_dir="runs/digits-1")
    assert isinstance(other.acquire(holder), Acquired)
    try:
        sim = Sim(tmp_path, lambda attempt, task: TaskScript(steps=3),
                  checkpoint={"dir": str(ckpt)})
        with pytest.raises(CheckpointDirInUse) as caught:
            sim.run()
    finally:
        other.release()
    assert str(caught.value) == (
        f"checkpoint dir {ckpt} is in use by job digits (pid 4242 on host node-a, run dir "
        "runs/digits-1); wait for it or use another checkpoint.dir")
    assert sim.world.agents_started == 0
    assert not sim.run_dir.path.exists()


def test_the_checkpoint_dir_is_locked_for_the_run_and_released_after(tmp_path: Path) -> None:
    ckpt = tmp_path / "ckpt"
    seen: list[HolderRecord | None] = []

    def scripts(attempt: int, task: str) -> TaskScript:
        seen.append(HolderRecord.parse((ckpt / LOCK_NAME).read_text()))
        return TaskScript(steps=3)

    sim = Sim(tmp_path, scripts, checkpoint={"dir": str(ckpt)})
    assert sim.run().state is JobState.SUCCEEDED
    assert seen and all(r is not None and r.job == "sim" and r.run_dir == str(sim.run_dir.path)
                        for r in seen)
    assert not (ckpt / LOCK_NAME).exists()


# --- C: the run directory breaks mid-job ------------------------------------------------------


class DiskFillsUp(EventLog):
    """An event log whose disk fills up once the job is under way: from the first task_progress
    on, its file is ``/dev/full`` (every write fails with ENOSPC), as on a full disk."""

    def emit(self, event: Event) -> dict[str, Any]:
        if event.TYPE is EventType.TASK_PROGRESS and self._file.name != "/dev/full":
            self._real = self._file
            self._file = open("/dev/full", "a", encoding="utf-8")  # noqa: SIM115
        return super().emit(event)

    def close(self) -> None:
        real = getattr(self, "_real", None)
        if real is not None:
            real.close()
        super().close()


def test_a_full_disk_mid_job_stops_every_task_and_still_writes_the_summary(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """ENOSPC simulated with /dev/full as the events file (see :class:`DiskFillsUp`); the summary
    goes to the real run dir, which still has room."""
    monkeypatch.setattr(coordinator_module, "EventLog", DiskFillsUp)
    sim = Sim(tmp_path, lambda attempt, task: TaskScript(steps=1000),
              restart={"max_restarts": 3})
    with pytest.raises(RunDirError) as caught:
        sim.run()
    message = str(caught.value)
    assert message.startswith(f"run dir {sim.run_dir.path}: no space left on device")
    assert "(free some space or choose another --run-dir)" in message
    assert "every task was stopped" in message
    assert "\n" not in message
    assert sim.world.agents_started == sim.world.agents_closed == 1
    assert sim.coordinator.machine.state is JobState.FAILED
    summary = json.loads(sim.run_dir.summary.read_text())
    assert summary["status"] == "failed" and summary["exit_code"] == 1
    assert "no space left on device" in summary["reason"]
    assert [e["event"] for e in sim.events()][:2] == ["job_started", "attempt_started"]
