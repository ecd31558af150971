"""``tfcluster status`` and ``logs`` on a run dir that was edited, cut or grown (issue 25, items 13,
14 and 17): a line or a summary of the wrong type is said in one line, never a traceback; status
advises ``--resume`` only for a run a resume takes; events and logs are read in bounded memory;
``logs -f`` stops when the run's coordinator is gone; Ctrl-C at start-up is no traceback."""

from __future__ import annotations

import fcntl
import importlib
import io
import json
import os
import tracemalloc
from pathlib import Path
from typing import Any

import pytest

from launcher.cli import parser as cli_parser
from launcher.output.browse import follow_log, print_log
from launcher.output.run_status import status_lines
from tests.support.run_dirs import event_lines, lost_run, replace_line

#: Line 2 of the lost run (attempt_started of attempt 0) or a later line replaced; what status says.
EVENT_VARIANTS: dict[str, tuple[int, dict[str, Any] | list[int] | str]] = {
    "a string ts": (2, {"ts": "x", "event": "attempt_started", "attempt": 0}),
    "a NaN ts": (2, '{"ts": NaN, "event": "attempt_started", "attempt": 0}'),
    "an infinite ts": (2, '{"ts": Infinity, "event": "attempt_started", "attempt": 0}'),
    "a ts of 1e300": (2, {"ts": 1e300, "event": "attempt_started", "attempt": 0}),
    "a negative ts": (2, {"ts": -5, "event": "attempt_started", "attempt": 0}),
    "a boolean ts": (2, {"ts": True, "event": "attempt_started", "attempt": 0}),
    "a missing ts": (2, {"event": "attempt_started", "attempt": 0}),
    "a string attempt": (2, {"ts": 101.0, "event": "attempt_started", "attempt": "0"}),
    "a string resume_step": (2, {"ts": 101.0, "event": "attempt_started", "attempt": 0,
                                 "resume_step": "abc"}),
    "a string step": (5, {"ts": 104.0, "event": "task_progress", "attempt": 0,
                          "task": "worker:0", "step": "abc"}),
    "a step of 1e300": (5, {"ts": 104.0, "event": "task_progress", "attempt": 0,
                            "task": "worker:0", "step": 1e300}),
    "a numeric task": (5, {"ts": 104.0, "event": "task_progress", "attempt": 0, "task": 7,
                           "step": 3}),
    "a string died_at": (7, {"ts": 106.0, "event": "task_failed", "attempt": 0,
                             "task": "worker:1", "died_at": "soon"}),
    "a string exit code": (7, {"ts": 106.0, "event": "task_failed", "attempt": 0,
                               "task": "worker:1", "died_at": 1.0, "exit_code": "3"}),
    "a list for health tasks": (9, {"ts": 108.0, "event": "job_health", "attempt": 0,
                                    "tasks": [1]}),
    "a JSON array": (3, [1]),
    "a number for an event name": (3, {"ts": 102.0, "event": 5}),
    "a string exit code at the end": (14, {"ts": 140.0, "event": "job_failed",
                                          "reason": "r", "exit_code": "x"}),
}

SUMMARY_VARIANTS: dict[str, bytes] = {
    "a string attempts": b'{"attempts": "x"}',
    "attempts of numbers": b'{"attempts": [1, 2]}',
    "figures of the wrong type": b'{"attempts": [{"attempt": 0, "max_step": "x", '
                                 b'"steps_lost": NaN, "recovery_s": "fast"}]}',
    "health of the wrong type": b'{"health": [], "metrics": "x"}',
    "task figures of the wrong type": b'{"health": {"slowest": 5, "tasks": {"worker:0": '
                                      b'{"steps_per_s": "x", "peak_rss_bytes": 1e300, '
                                      b'"cpu_percent_mean": Infinity}}}}',
    "metrics of the wrong type": b'{"metrics": {"reports": 5, "dropped": {"a": "b"}}}',
    "events of the wrong type": b'{"events": {"dropped": {"task_progress": "x"}}}',
}


@pytest.mark.parametrize(("line", "record"), EVENT_VARIANTS.values(), ids=EVENT_VARIANTS.keys())
def test_a_line_of_the_wrong_type_is_skipped_and_said_naming_the_line(
        tmp_path: Path, line: int, record: Any) -> None:
    run_dir = tmp_path / "run"
    lost_run(run_dir, tmp_path / "ckpt")
    if isinstance(record, str):
        lines = event_lines(run_dir)
        lines[line - 1] = record
        (run_dir / "events.jsonl").write_text("\n".join(lines) + "\n")
    else:
        replace_line(run_dir, line, record)
    shown = status_lines(run_dir, now=500.0)
    said = [text for text in shown if text.startswith("events.jsonl: skipped 1 line(s)")]
    assert len(said) == 1 and f"(line {line}: " in said[0], shown
    assert all("\n" not in text for text in shown)
    # a resume would refuse that line: status does not advise --resume plainly
    assert "continue it with tfcluster run --resume" not in shown[0]
    assert f"first correct or delete events.jsonl line {line}" in shown[0]


@pytest.mark.parametrize("summary", SUMMARY_VARIANTS.values(), ids=SUMMARY_VARIANTS.keys())
def test_a_summary_of_the_wrong_type_shows_what_it_can(tmp_path: Path, summary: bytes) -> None:
    run_dir = tmp_path / "run"
    lost_run(run_dir, tmp_path / "ckpt")
    (run_dir / "summary.json").write_bytes(summary)
    shown = status_lines(run_dir, now=500.0)
    assert shown[0].startswith("job hostile: not running: its coordinator is gone")
    assert any(text.startswith("attempt 1: running") for text in shown)


@pytest.mark.parametrize("summary", [b"\xff\xfe{", b"[1]", b"{" * 100_000, b"null"],
                         ids=["not UTF-8", "an array", "nested too deep", "null"])
def test_a_summary_that_is_not_one_is_said_in_one_line(tmp_path: Path, summary: bytes) -> None:
    run_dir = tmp_path / "run"
    lost_run(run_dir, tmp_path / "ckpt")
    (run_dir / "summary.json").write_bytes(summary)
    shown = status_lines(run_dir, now=500.0)
    said = [text for text in shown if "summary.json: not a summary" in text]
    assert len(said) == 1 and len(said[0]) < 300


def test_status_advises_resume_only_for_a_run_a_resume_takes(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    lost_run(run_dir, tmp_path / "ckpt")
    assert f"continue it with tfcluster run --resume {run_dir}" in status_lines(run_dir)[0]
    (run_dir / "spec.json").unlink()
    first = status_lines(run_dir)[0]
    assert "--resume" not in first and "it cannot be resumed (spec.json is missing" in first


def test_status_reads_a_large_events_file_in_bounded_memory(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    lost_run(run_dir, tmp_path / "ckpt")
    line = json.dumps({"ts": 120.0, "event": "task_progress", "attempt": 1, "task": "worker:0",
                       "step": 30, "metrics": {f"m{i}": 0.5 for i in range(40)}, "first": False})
    with (run_dir / "events.jsonl").open("a") as handle:
        handle.write((line + "\n") * 10_000)  # 8 MB
    tracemalloc.start()
    try:
        shown = status_lines(run_dir, now=500.0)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert any("step 30" in text for text in shown)
    assert peak < 4 * 2**20, f"status held {peak / 2**20:.0f} MiB"


class _Discard(io.StringIO):
    def write(self, text: str) -> int:
        self.written = getattr(self, "written", 0) + len(text)
        return len(text)


def test_logs_streams_a_large_log(tmp_path: Path) -> None:
    log = tmp_path / "big.log"
    with log.open("wb") as handle:
        for _ in range(24):
            handle.write(b"x" * (2**20 - 1) + b"\n")
    out = _Discard()
    tracemalloc.start()
    try:
        assert print_log(log, out) == 24 * 2**20
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert out.written == 24 * 2**20
    assert peak < 8 * 2**20, f"logs held {peak / 2**20:.0f} MiB"


@pytest.fixture
def abandoned_run(tmp_path: Path) -> Path:
    """A run whose coordinator died: its lock file is there, and nobody holds it."""
    run_dir = tmp_path / "run"
    lost_run(run_dir, tmp_path / "ckpt")
    return run_dir


def test_follow_stops_when_the_runs_coordinator_is_gone(abandoned_run: Path) -> None:
    def sleep(_seconds: float) -> None:
        raise AssertionError("still following a run whose coordinator is gone")

    out, err = io.StringIO(), io.StringIO()
    follow_log(abandoned_run, "worker:0", None, out, err=err, sleep=sleep)
    assert out.getvalue() == "worker:0 attempt 1 line 1\nworker:0 attempt 1 line 2\n"
    assert "the run's coordinator is gone" in err.getvalue()
    assert f"tfcluster run --resume {abandoned_run}" in err.getvalue()


def test_follow_goes_on_while_the_coordinator_holds_the_lock(abandoned_run: Path) -> None:
    fd = os.open(abandoned_run / ".tfcluster-run.lock", os.O_RDWR)
    fcntl.flock(fd, fcntl.LOCK_EX)
    polls: list[float] = []

    def sleep(seconds: float) -> None:
        polls.append(seconds)
        if len(polls) == 3:
            os.close(fd)  # the coordinator dies

    err = io.StringIO()
    follow_log(abandoned_run, "worker:0", None, io.StringIO(), err=err, sleep=sleep)
    assert len(polls) == 3 and "coordinator is gone" in err.getvalue()


def test_ctrl_c_while_the_parser_is_built_is_one_line(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    def interrupted() -> None:
        raise KeyboardInterrupt

    cli_main = importlib.import_module("launcher.cli.main")
    monkeypatch.setattr(cli_parser, "build_parser", interrupted)
    monkeypatch.setattr(cli_main, "build_parser", interrupted, raising=False)
    assert cli_main.main(["status", "nowhere"]) == 130
    assert capsys.readouterr().err == "tfcluster: interrupted\n"
