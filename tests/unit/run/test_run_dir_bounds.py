"""Every file the coordinator writes has a size bound, and what it writes is strict JSON (issue 25,
items 13 and 17): ``task_progress`` events leave the metrics to ``metrics.jsonl``; past its bound
``events.jsonl`` drops routine events first, never the job's end, and ``summary.json`` counts what
was left out; a NaN a task reports is written as null, never as a bare ``NaN``."""

from __future__ import annotations

import io
import json
import math
import sys
from pathlib import Path
from typing import Any

from launcher.job.coordinator import Coordinator
from launcher.job.seams import LoopSeams
from launcher.job.state import JobState
from launcher.output.console import Console
from launcher.output.task_logs import TaskLogs
from launcher.plan.ports import PortAllocator
from launcher.run.directory import RunDir
from launcher.run.event_log import EventLog, read_events
from launcher.run.events import JobFailed, JobHealth, JobRestarting, TaskProgress
from launcher.spec.loading import spec_from_dict
from tests.support.fake_backend import FakeBackend, FakeWorld, SimClock, SimInbox, TaskScript, run_inline
from tests.support.planning import named_planner


def strict(text: str) -> list[Any]:
    """Every line of ``text`` as JSON, refusing NaN and Infinity as any strict reader does."""
    def refuse(name: str) -> None:
        raise ValueError(f"bare {name} is not JSON")
    return [json.loads(line, parse_constant=refuse) for line in text.splitlines() if line]


def test_progress_events_leave_the_metrics_to_metrics_jsonl_and_every_file_is_strict_json(
        tmp_path: Path) -> None:
    big = {"loss": math.nan, "grad_norm": math.inf, **{f"layer_{i}": 0.5 for i in range(200)}}
    clock = SimClock()
    inbox = SimInbox(clock)
    world = FakeWorld(clock=clock, inbox_for=lambda: inbox,
                      scripts=lambda attempt, task: TaskScript(steps=20, step_s=1.5, metrics=big),
                      failing_hosts={})
    spec = spec_from_dict({"name": "sim", "entrypoint": {"command": ["train"]},
                           "tasks": [{"type": "worker", "host": "localhost", "count": 2}]})
    run_dir = RunDir(tmp_path / "run")
    planner = named_planner(spec, run_dir=str(run_dir.path), local_python=sys.executable,
                            base_dir=str(tmp_path))
    console = Console(out=io.StringIO(), err=io.StringIO(), colour=False)
    result = Coordinator(planner, run_dir, FakeBackend(world), console, seams=LoopSeams(
        clock=clock, new_inbox=lambda: inbox, spawn=run_inline,
        ports=PortAllocator(lock_dir=str(tmp_path / "ports")))).run()
    assert result.state is JobState.SUCCEEDED
    progress = [e for e in read_events(run_dir.events) if e["event"] == "task_progress"]
    assert progress and all(e["metrics"] == {} for e in progress)
    kept = strict((run_dir.path / "metrics.jsonl").read_text())
    assert len(kept) == 40 and kept[0]["metrics"]["loss"] is None  # NaN kept as null
    assert kept[0]["metrics"]["layer_199"] == 0.5
    strict(run_dir.events.read_text())
    summary, = strict(run_dir.summary.read_text().replace("\n", " ") + "\n")
    assert summary["events"] == {"file": "events.jsonl", "bytes": run_dir.events.stat().st_size,
                                 "max_bytes": 128 * 2**20, "dropped": {}}


def health(attempt: int) -> JobHealth:
    return JobHealth(attempt=attempt, tasks={"worker:0": {"steps_per_s": math.nan}},
                     steps_per_s=math.inf, slowest=None, stragglers=())


def test_past_its_bound_events_jsonl_drops_routine_events_first_and_never_the_end(
        tmp_path: Path) -> None:
    heard: list[str] = []
    log = EventLog(tmp_path / "events.jsonl", max_bytes=2000, reserve_bytes=20_000)
    log.subscribe(lambda record: heard.append(record["event"]))
    for step in range(100):
        log.emit(TaskProgress(0, "worker:0", step, {}, False))
        log.emit(health(0))
    for attempt in range(1, 2000):
        log.emit(JobRestarting(attempt, "x" * 100, 0.1, True, None, None))
    log.emit(JobFailed("j", "restarts used up", 1, 2000, None))
    log.close()
    size = (tmp_path / "events.jsonl").stat().st_size
    assert size <= 2000 + 20_000 + 1000  # the bound, and the end past it
    written = [e["event"] for e in strict((tmp_path / "events.jsonl").read_text())]
    assert written[-1] == "job_failed"  # the end is always written
    assert 0 < written.count("task_progress") < 100
    assert 20 < written.count("job_restarting") < 1999
    summary = log.summary()
    assert summary["dropped"]["task_progress"] == 100 - written.count("task_progress")
    assert summary["dropped"]["job_health"] == 100 - written.count("job_health")
    assert summary["dropped"]["job_restarting"] == 1999 - written.count("job_restarting")
    assert "job_failed" not in summary["dropped"]
    assert summary["bytes"] == size
    assert len(heard) == 100 * 2 + 1999 + 1  # listeners hear every event all the same


def test_the_summary_is_strict_json(tmp_path: Path) -> None:
    run_dir = RunDir(tmp_path)
    run_dir.write_summary({"health": {"tasks": {"worker:0": {"steps_per_s": math.nan}}},
                           "figures": [math.inf, -math.inf, 1.5]})
    summary, = strict(run_dir.summary.read_text().replace("\n", " ") + "\n")
    assert summary == {"health": {"tasks": {"worker:0": {"steps_per_s": None}}},
                       "figures": [None, None, 1.5]}


def test_a_task_log_stops_at_its_bound_and_says_so_once(tmp_path: Path) -> None:
    warned: list[str] = []
    logs = TaskLogs(RunDir(tmp_path), 0, on_error=warned.append, max_bytes=10_000)
    for number in range(1000):
        logs.write("worker:0", f"line {number:04d} " + "x" * 80)
        logs.write("worker:1", "short")
    logs.close()
    logs.write("worker:0", "an agent's last words, past the bound")
    kept = (tmp_path / "attempt-0" / "worker-0.log").read_text().splitlines()
    assert len("\n".join(kept[:-1])) <= 10_000
    assert kept[-1].startswith("[tfcluster] ") and "reached its bound" in kept[-1]
    assert len(warned) == 1 and "worker:0's later output is not kept" in warned[0]
    assert logs.dropped == {"worker:0": 1001 - len(kept) + 1}
    assert len((tmp_path / "attempt-0" / "worker-1.log").read_text().splitlines()) == 1000
