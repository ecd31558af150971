"""The lines of issue 27 as data: a stop by the user, and ``local``'s flags for spec fields."""

from __future__ import annotations

from pathlib import Path

from launcher.cli.local_words import in_flags
from launcher.cli.stopped import stopped_line, stopped_signal
from launcher.run.outcome import AttemptResult, AttemptStatus


def attempt(signal_name: str | None) -> AttemptResult:
    return AttemptResult(attempt=0, status=AttemptStatus.INTERRUPTED, started_at=0.0,
                         ended_at=1.0, interrupt_signal=signal_name)


def test_a_stop_is_read_from_the_attempt_or_from_a_stop_between_attempts() -> None:
    assert stopped_signal([attempt("SIGINT")], "tfcluster was stopped by SIGINT") == "SIGINT"
    assert stopped_signal([attempt(None)], "tfcluster was stopped by SIGTERM") == "SIGTERM"
    assert stopped_signal([attempt(None)], "a task failed and restarts are off") is None


def test_a_stop_says_the_step_and_how_to_go_on() -> None:
    assert stopped_line("j", "SIGINT", 120, Path("/r"), 130) == (
        "job j stopped by SIGINT (Ctrl-C) with its checkpoints saved up to step 120: "
        "tfcluster run --resume /r continues from there; exit code 130")
    assert stopped_line("j", "SIGTERM", None, Path("/r"), 143) == (
        "job j stopped by SIGTERM with no checkpoint tfcluster knows of (tfcluster run --resume "
        "/r starts it again; a script that restores checkpoints of its own resumes from them); "
        "exit code 143")


def test_local_lines_name_flags_where_others_name_spec_fields() -> None:
    assert in_flags("gave up after 1 restart(s) (restart.max_restarts = 1)") == \
        "gave up after 1 restart(s) (--max-restarts 1)"
    assert in_flags("no checkpoint was ever written to /c (checkpoint.dir)") == \
        "no checkpoint was ever written to /c (--checkpoint-dir)"
    assert in_flags("no progress for health.hang_timeout_s") == "no progress for --hang-timeout"
