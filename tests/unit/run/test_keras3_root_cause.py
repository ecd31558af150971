"""The root cause of the TF multi-worker Keras tutorial run as written under TF 2.21 (Keras 3's
``model.fit`` under MWMS) shows its exception line first, bounded, and names the known problem with
its fix. ``data/keras3_mwms_traceback.txt`` is the traceback a real run sent (``tfcluster local
-n 2 -- python3 keras3_fit.py``, TF 2.21.0, Keras 3.15.1): 96 lines, most of them array values."""

from __future__ import annotations

from pathlib import Path

from launcher.run.excerpt import KERAS3_MWMS, known_problem, traceback_excerpt
from launcher.run.failures import (
    EVIDENCE_TRACEBACK_LINES,
    FailureKind,
    TaskFailure,
    format_report,
)

TRACEBACK = (Path(__file__).parent / "data" / "keras3_mwms_traceback.txt").read_text()


def keras3_failure(traceback: str = TRACEBACK) -> TaskFailure:
    return TaskFailure(task="worker:1", host="localhost", attempt=0, kind=FailureKind.EXITED,
                       died_at=10.0, observed_at=10.1, exit_code=1, traceback=traceback)


def test_the_exception_line_comes_first_then_its_end_then_the_frames() -> None:
    lines = keras3_failure().evidence()
    assert lines[0] == "ValueError: Attempt to convert a value (PerReplica:{"
    assert lines[2].startswith("\u2026 [") and "more line(s) of the message" in lines[2]
    assert lines[3] == ("}) with an unsupported type (<class "
                        "'tensorflow.python.distribute.values.PerReplica'>) to a Tensor.")
    assert lines[4] == "Traceback (most recent call last):"
    assert '  File "/tmp/f4/keras3_fit.py", line 23, in <module>' in lines
    assert lines[-1].strip().startswith("^^^")  # the innermost frame ends the excerpt
    assert len(lines) <= EVIDENCE_TRACEBACK_LINES
    assert sum("0." in line and "..." in line for line in lines) <= 1  # not the array values


def test_the_report_names_keras_3_under_mwms_and_its_fix() -> None:
    report = format_report([keras3_failure()], job="tutorial")
    assert "Known problem: Keras 3" in report and "MultiWorkerMirroredStrategy" in report
    assert "TF_USE_LEGACY_KERAS=1" in report and "tf_keras" in report
    assert len(report.splitlines()) <= EVIDENCE_TRACEBACK_LINES + 3


def test_the_same_error_from_tf_keras_or_a_custom_loop_is_not_called_keras_3() -> None:
    legacy = TRACEBACK.replace("/keras/src/", "/tf_keras/src/")
    assert known_problem(legacy, ()) is None
    assert known_problem("Traceback (most recent call last):\nValueError: boom\n", ()) is None
    assert known_problem(TRACEBACK, ()) is KERAS3_MWMS


def test_chained_exceptions_show_the_last_one_first() -> None:
    text = ("Traceback (most recent call last):\n  File \"a.py\", line 1, in <module>\n"
            "KeyError: 'x'\n\nDuring handling of the above exception, another exception "
            "occurred:\n\nTraceback (most recent call last):\n  File \"a.py\", line 3, in "
            "<module>\n    raise RuntimeError('second')\nRuntimeError: second\n")
    assert traceback_excerpt(text, 30) == [
        "RuntimeError: second", "Traceback (most recent call last):",
        '  File "a.py", line 3, in <module>', "    raise RuntimeError('second')"]


def test_text_that_is_no_traceback_gives_its_end() -> None:
    assert traceback_excerpt("a\nb\nc\n", 2) == ["b", "c"]
