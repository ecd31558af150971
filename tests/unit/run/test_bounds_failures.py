"""Issue 7, bounded evidence: a task that writes a 10 MB stderr line or a huge traceback still gets
a short root-cause block and a small record; every cut says so, and secrets are masked."""

from __future__ import annotations

import json
from typing import Any

from launcher.run.failures import (
    EVIDENCE_LINE_CHARS,
    EVIDENCE_STDERR_LINES,
    EVIDENCE_TRACEBACK_LINES,
    STORED_LINE_CHARS,
    STORED_MESSAGE_CHARS,
    STORED_STDERR_CHARS,
    STORED_TRACEBACK_CHARS,
    FailureKind,
    TaskFailure,
    format_report,
)

TEN_MB = 10_000_000
#: What a marker line may add to a bound.
MARKER_CHARS = 80


def failure(**fields: Any) -> TaskFailure:
    values: dict[str, Any] = {"task": "worker:0", "host": "localhost", "attempt": 0,
                              "kind": FailureKind.EXITED, "died_at": 100.0, "observed_at": 100.5,
                              "exit_code": 1}
    return TaskFailure(**{**values, **fields})


def test_a_10mb_stderr_line_is_cut_in_the_evidence() -> None:
    cause = failure(stderr_tail=("before", "E" * TEN_MB))
    lines = cause.evidence()
    assert lines[0] == "before"
    assert lines[1] == "E" * EVIDENCE_LINE_CHARS + (
        f"\u2026 [{TEN_MB - EVIDENCE_LINE_CHARS} more characters, see the task log]")
    report = format_report([cause], job="j")
    assert len(report) < 2 * EVIDENCE_LINE_CHARS + 500


def test_at_most_15_stderr_lines_each_cut() -> None:
    tail = tuple(f"{i:02d}" + "y" * 70_000 for i in range(40))  # what the agent sends at most
    lines = failure(stderr_tail=tail).evidence()
    assert len(lines) == EVIDENCE_STDERR_LINES
    assert lines[0].startswith(f"{40 - EVIDENCE_STDERR_LINES:02d}")
    assert all(len(line) <= EVIDENCE_LINE_CHARS + MARKER_CHARS for line in lines)


def test_a_huge_traceback_shows_its_exception_first_then_its_innermost_frames_bounded() -> None:
    frames = "".join(f'  File "train.py", line {i}, in f{i}\n    f{i + 1}()\n' for i in range(5000))
    traceback = f"Traceback (most recent call last):\n{frames}RuntimeError: {'boom ' * 200_000}\n"
    lines = failure(traceback=traceback).evidence()
    assert len(lines) == EVIDENCE_TRACEBACK_LINES
    assert lines[-1] == "    f5000()"  # the innermost frame
    assert lines[0].startswith("RuntimeError: boom boom")
    assert lines[0].endswith(f"[{len('RuntimeError: ' + 'boom ' * 200_000) - EVIDENCE_LINE_CHARS}"
                              " more characters, see the task log]")
    assert all(len(line) <= EVIDENCE_LINE_CHARS + MARKER_CHARS for line in lines)


def test_to_dict_bounds_the_stderr_tail_keeping_the_newest_lines() -> None:
    tail = tuple(f"line {i} " + "z" * 65_000 for i in range(40))
    stored = failure(stderr_tail=tail).to_dict()["stderr_tail"]
    assert sum(len(line) for line in stored) <= STORED_STDERR_CHARS + 2 * MARKER_CHARS
    assert stored[-1].startswith("line 39 ")
    assert all(len(line) <= STORED_LINE_CHARS + MARKER_CHARS for line in stored)
    kept = len(stored) - 1
    assert stored[0] == f"\u2026 [{40 - kept} earlier line(s), see the task log]"


def test_to_dict_keeps_the_end_of_a_huge_traceback() -> None:
    traceback = "Traceback (most recent call last):\n" + "  frame\n" * 1_000_000 + \
        "ValueError: the real reason\n"
    stored = failure(traceback=traceback).to_dict()["traceback"]
    assert len(stored) <= STORED_TRACEBACK_CHARS + MARKER_CHARS
    assert stored.endswith("ValueError: the real reason\n")
    assert stored.startswith(f"\u2026 [{len(traceback) - STORED_TRACEBACK_CHARS} earlier "
                             "characters, see the task log]\n")


def test_short_evidence_is_kept_whole() -> None:
    cause = failure(traceback="Traceback:\nValueError: x\n", stderr_tail=("a", "b"), message="m")
    data = cause.to_dict()
    assert (data["traceback"], data["stderr_tail"], data["message"]) == \
        ("Traceback:\nValueError: x\n", ["a", "b"], "m")


def test_the_record_of_a_10mb_failure_is_small() -> None:
    cause = failure(traceback="T" * TEN_MB, stderr_tail=tuple("S" * 65_536 for _ in range(40)),
                    message="M" * TEN_MB)
    size = len(json.dumps(cause.to_dict()))
    assert size < STORED_TRACEBACK_CHARS + STORED_STDERR_CHARS + STORED_MESSAGE_CHARS + 2000
    assert len(cause.headline()) < STORED_MESSAGE_CHARS + 200


def test_secrets_in_evidence_and_record_are_masked() -> None:
    cause = failure(
        traceback="Traceback:\n  conn = connect('postgres://app:hunter2@db/prod')\n"
                  "OperationalError: password=hunter2 rejected\n",
        stderr_tail=("using API_KEY=abc123", "https://ghp_secret@github.com/o/r"),
        message="cannot start 'x' with --token=abc")
    shown = "\n".join(cause.evidence()) + cause.headline() + json.dumps(cause.to_dict())
    assert "hunter2" not in shown and "abc123" not in shown and "ghp_secret" not in shown
    assert "--token=abc" not in shown
    plain = failure(stderr_tail=("using API_KEY=abc123",), traceback=None)
    assert plain.evidence() == ["using API_KEY=***"]


def test_a_secret_straddling_the_cut_is_still_masked() -> None:
    line = "x" * (EVIDENCE_LINE_CHARS - 10) + " API_KEY=" + "s" * 200
    (shown,) = failure(stderr_tail=(line,)).evidence()
    head = shown.split("\u2026")[0]
    assert head.endswith(" API_KEY=*")  # the mask, cut where the line is cut
    assert "s" not in head
