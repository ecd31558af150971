"""What a run records, read back: every event type round-trips through ``events.jsonl`` and
:func:`launcher.run.events.parse`; a record that does not fit its type is one clear error; an
engine's own event registers by subclassing; ``summary.json`` takes the sections others add."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import pytest

from launcher.run.event_log import EventLog, read_events, read_logged
from launcher.run.events import (
    AttemptStarted,
    CheckpointFound,
    Event,
    EventType,
    FaultInjected,
    JobFailed,
    JobHealth,
    JobRestarting,
    JobResumed,
    JobStarted,
    JobStopping,
    JobSucceeded,
    ModelExported,
    SkippedCheckpoint,
    TaskExited,
    TaskFailed,
    TaskMemoryHigh,
    TaskPreempted,
    TaskProgress,
    TaskStarted,
    TaskStraggling,
    UnknownEvent,
    parse,
)
from launcher.run.failures import FailureKind, TaskFailure
from launcher.run.from_json import RecordError
from launcher.run.summary import job_summary

FAILURE = TaskFailure(task="worker:1", host="node-b", attempt=0, kind=FailureKind.EXITED,
                      died_at=10.0, observed_at=10.5, exit_code=3, traceback="Traceback...",
                      stderr_tail=("boom",), message="note")

ONE_OF_EACH: list[Event] = [
    JobStarted("j", "/runs/j", ["chief:0", "worker:0"], ["localhost"]),
    AttemptStarted(0, None, None, {"chief:0": 2222}),
    TaskStarted(0, "chief:0", "localhost", 42, "/runs/j/attempt-0/chief-0.log", warm=True),
    TaskProgress(0, "chief:0", 7, {"loss": 0.5}, True),
    TaskExited(0, "chief:0", "localhost", 0),
    TaskPreempted(0, "worker:0", 7),
    TaskFailed(FAILURE),
    FaultInjected(0, "worker:1", "node-b", "SIGKILL", 5, fault="kill:worker:1", tasks=("worker:1",)),
    JobStopping(0, "worker:1 failed"),
    CheckpointFound(0, 5, "/c/ckpt-5", "/c", (SkippedCheckpoint("/c/ckpt-6", "no .index"),)),
    JobRestarting(1, "worker:1 failed", 1.0, True, 5, "/c/ckpt-5"),
    JobResumed("j", 2, 1, "was lost", 1, 3, False, 5, "/c/ckpt-5"),
    JobSucceeded("j", 2),
    JobFailed("j", "restarts used up", 3, 2, FAILURE),
    JobHealth(0, {"chief:0": {"step": 7, "cpu_percent": 12.5}}, 3.5, "chief:0", ["worker:0"]),
    TaskStraggling(0, "worker:0", True, 1.0, 4.0, 100.0, 0.5, 30.0),
    TaskMemoryHigh(0, "worker:0", "localhost", 2**30, None, 2**31, "worker:0 uses 1 GiB"),
    ModelExported(0, "chief:0", "/models/final", "saved_model"),
]


def written(tmp_path: Path, events: Sequence[Event]) -> list[dict[str, Any]]:
    log = EventLog(tmp_path / "events.jsonl", clock=lambda: 100.0)
    for event in events:
        log.emit(event)
    log.close()
    return read_events(tmp_path / "events.jsonl")


def test_every_event_type_has_its_dataclass() -> None:
    assert {e.event_name for e in ONE_OF_EACH} == {t.value for t in EventType}


def test_every_event_reads_back_as_what_was_written(tmp_path: Path) -> None:
    for record in written(tmp_path, ONE_OF_EACH):
        logged = parse(record)
        assert logged.ts == 100.0
        assert logged.event.event_name == record["event"]
        again = {"ts": 100.0, "event": logged.event.event_name, **logged.event.record()}
        assert json.loads(json.dumps(again, default=str)) == record


def test_a_failure_reads_back_as_the_same_failure(tmp_path: Path) -> None:
    failed, ended = (parse(r).event for r in written(tmp_path, [TaskFailed(FAILURE),
                                                                JobFailed("j", "r", 3, 1, FAILURE)]))
    assert isinstance(failed, TaskFailed) and failed.failure == FAILURE
    assert isinstance(ended, JobFailed) and ended.root_cause == FAILURE


@pytest.mark.parametrize(("record", "error"), [
    ({"ts": 1.0, "event": "task_progress", "attempt": "0", "task": "chief:0", "step": 1,
      "metrics": {}, "first": True}, "task_progress.attempt: expected int, got '0'"),
    ({"ts": 1.0, "event": "task_progress", "attempt": 0, "task": "chief:0", "step": 1,
      "metrics": {}}, "task_progress.first: missing"),
    ({"ts": 1.0, "event": "task_failed", "task": "w", "host": "h", "attempt": 0, "kind": "gone",
      "died_at": 1.0, "observed_at": 1.0}, "task_failed.kind: expected one of"),
    ({"ts": "soon", "event": "job_succeeded", "job": "j", "attempts": 1}, "job_succeeded.ts"),
    ({"ts": 1.0, "event": 7}, "event: expected an event name"),
])
def test_a_record_that_does_not_fit_its_type_is_one_clear_error(record: dict[str, Any],
                                                                error: str) -> None:
    with pytest.raises(RecordError, match=error.replace("(", r"\(")):
        parse(record)


def test_an_unknown_event_is_kept_as_it_was(tmp_path: Path) -> None:
    record = {"ts": 5.0, "event": "from_a_newer_tfcluster", "x": [1, 2]}
    logged = parse(record)
    assert logged.event == UnknownEvent("from_a_newer_tfcluster", {"x": [1, 2]})
    assert written(tmp_path, [logged.event])[0] == {**record, "ts": 100.0}


@dataclass(frozen=True)
class EngineAttempt(Event):
    TYPE: ClassVar[str] = "test_engine_attempt"
    attempt: int
    nodes: Sequence[str]


def test_an_engine_defines_its_own_event_by_subclassing(tmp_path: Path) -> None:
    (record,) = written(tmp_path, [EngineAttempt(1, ["n1", "n2"])])
    assert record == {"ts": 100.0, "event": "test_engine_attempt", "attempt": 1,
                      "nodes": ["n1", "n2"]}
    assert parse(record).event == EngineAttempt(1, ("n1", "n2"))


def test_two_classes_may_not_claim_one_name() -> None:
    with pytest.raises(TypeError, match="already"):
        @dataclass(frozen=True)
        class Impostor(Event):
            TYPE: ClassVar[str] = EventType.JOB_STARTED


def test_a_torn_last_line_is_skipped_and_a_line_that_is_no_event_only_when_asked(
        tmp_path: Path) -> None:
    written(tmp_path, [JobSucceeded("j", 1)])
    with (tmp_path / "events.jsonl").open("a") as handle:
        handle.write('{"ts": 101.0, "event": "job_fa')  # what a crash mid-write leaves
    assert [e.event for e in read_logged(tmp_path / "events.jsonl")] == [JobSucceeded("j", 1)]
    assert read_logged(tmp_path / "events.jsonl", torn_ok=True, only=[TaskStarted]) == []
    with (tmp_path / "events.jsonl").open("a") as handle:
        handle.write("\n[1]\n")
    with pytest.raises(ValueError, match=r"events.jsonl:3: not an event \(a JSON list"):
        read_logged(tmp_path / "events.jsonl")
    assert [e.event for e in read_logged(tmp_path / "events.jsonl", torn_ok=True)] == \
        [JobSucceeded("j", 1)]


def test_the_summary_takes_the_sections_others_add(tmp_path: Path) -> None:
    written(tmp_path, [ModelExported(0, "chief:0", "/m", "h5")])
    summary = job_summary(job="j", status="succeeded", exit_code=0, reason="done", attempts=[],
                          run_dir=str(tmp_path), started=1.0,
                          sections={"slurm": {"job_id": "7"}, "health": {}})
    assert summary["slurm"] == {"job_id": "7"} and summary["health"] == {}
    assert summary["export"] == {"attempt": 0, "task": "chief:0", "path": "/m", "format": "h5"}
    with pytest.raises(ValueError, match="may not replace status"):
        job_summary(job="j", status="succeeded", exit_code=0, reason="done", attempts=[],
                    run_dir=str(tmp_path), started=1.0, sections={"status": "mine"})
