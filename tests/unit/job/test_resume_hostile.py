"""``--resume`` of a run dir a crash, a reboot or a person left behind: a torn or NUL-padded last
line of ``events.jsonl`` is skipped (said once) and the run resumes from its checkpoint; a line of
the wrong type is one error naming the line and the field; no advice leads to a new run that
would write over the run's checkpoints (issue 25, item 4)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from launcher.job.resume import open_resume
from launcher.run.directory import RunDirError
from launcher.run.event_log import EventLog, read_events
from launcher.run.events import JobResumed
from tests.support.run_dirs import event_lines, failed_run, lost_run, replace_line

TORN_TAILS = {
    "cut mid-write": b'{"ts": 130.5, "event": "task_progress", "attempt": 1, "ta',
    "NUL-padded (a reboot)": b"\0" * 4096,
    "cut, then NUL-padded": b'{"ts": 130.5, "event": "task_pro' + b"\0" * 512,
}


@pytest.mark.parametrize("tail", TORN_TAILS.values(), ids=TORN_TAILS.keys())
def test_a_torn_last_line_is_skipped_said_once_and_the_run_resumes_from_its_checkpoint(
        tmp_path: Path, tail: bytes) -> None:
    run_dir = tmp_path / "run"
    lost_run(run_dir, tmp_path / "ckpt")
    with (run_dir / "events.jsonl").open("ab") as handle:
        handle.write(tail)
    resumption = open_resume(run_dir)
    assert resumption.start.first_attempt == 2
    assert resumption.start.resume_from is not None and resumption.start.resume_from.step == 20
    assert [h.attempt for h in resumption.start.history] == [0, 1]
    assert len(resumption.notes) == 1
    assert "skipped 1 torn line(s) (line 15" in resumption.notes[0]


def test_the_next_coordinator_ends_a_torn_line_before_it_appends(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    lost_run(run_dir, tmp_path / "ckpt")
    with (run_dir / "events.jsonl").open("ab") as handle:
        handle.write(TORN_TAILS["cut mid-write"])
    log = EventLog(run_dir / "events.jsonl")
    log.emit(JobResumed(job="hostile", attempt=2, previous_attempt=1,
                        previous_coordinator="was lost", restarts_used=1, max_restarts=3,
                        counts_against_budget=False, resume_step=20, resume_checkpoint=None))
    log.close()
    assert read_events(run_dir / "events.jsonl")[-1]["event"] == "job_resumed"
    assert open_resume(run_dir).start.first_attempt == 2  # and it resumes again


WRONG = {
    "a JSON array": ([1], "not an event (a JSON list, not an object)"),
    "a string resume_step": ({"ts": 104.0, "event": "attempt_started", "attempt": 0,
                              "resume_step": "abc", "resume_checkpoint": None, "ports": {}},
                             "attempt_started.resume_step: expected int, got 'abc'"),
    "a string ts": ({"ts": "x", "event": "job_started", "job": "j", "run_dir": "/r",
                     "tasks": [], "hosts": []}, "job_started.ts: expected a time, got 'x'"),
    "a ts of 1e300": ({"ts": 1e300, "event": "job_started", "job": "j", "run_dir": "/r",
                       "tasks": [], "hosts": []}, "job_started.ts: expected a time"),
    "a missing attempt": ({"ts": 104.0, "event": "attempt_started", "resume_step": None,
                           "resume_checkpoint": None, "ports": {}},
                          "attempt_started.attempt: missing"),
    "a port of the wrong type": ({"ts": 104.0, "event": "attempt_started", "attempt": 0,
                                  "ports": {"worker:0": "x"}},
                                 "attempt_started.ports['worker:0']: expected int, got 'x'"),
    "a string step": ({"ts": 104.0, "event": "task_progress", "attempt": 0, "step": "abc"},
                      "task_progress.step: expected int, got 'abc'"),
    "a failure without its task": ({"ts": 104.0, "event": "task_failed", "attempt": 0},
                                   "task_failed.task: missing"),
}


@pytest.mark.parametrize(("record", "said"), WRONG.values(), ids=WRONG.keys())
def test_a_line_of_the_wrong_type_is_one_error_naming_the_line_and_the_field(
        tmp_path: Path, record: object, said: str) -> None:
    run_dir = tmp_path / "run"
    lost_run(run_dir, tmp_path / "ckpt")
    replace_line(run_dir, 2, record)
    with pytest.raises(RunDirError) as raised:
        open_resume(run_dir)
    message = str(raised.value)
    assert "\n" not in message
    assert f"events.jsonl:2: {said}" in message
    assert "correct or delete that line, then resume again" in message


def test_no_refusal_advises_a_new_run_that_would_write_over_the_checkpoints(
        tmp_path: Path) -> None:
    failed_run(tmp_path / "failed", tmp_path / "ckpt")
    lost_run(tmp_path / "format", tmp_path / "ckpt2")
    stored = json.loads((tmp_path / "format" / "spec.json").read_text())
    (tmp_path / "format" / "spec.json").write_text(json.dumps({**stored, "format": 99}))
    lost_run(tmp_path / "json", tmp_path / "ckpt3")
    (tmp_path / "json" / "spec.json").write_text("[" * 100_000)
    for name in ("failed", "format", "json"):
        with pytest.raises(RunDirError) as raised:
            open_resume(tmp_path / name)
        message = str(raised.value)
        assert "start a new run with a checkpoint directory of its own (--checkpoint-dir" in \
            message, message
        assert len(event_lines(tmp_path / "failed")) > 0
