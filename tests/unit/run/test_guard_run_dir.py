"""Issue 7 C: what is wrong with a run directory is one line saying what to do, and one run
directory holds one run (tests/integration/test_guard_runs.py runs the same through the CLI)."""

from __future__ import annotations

import errno
import json
import os
import time
from pathlib import Path

import pytest

from launcher.run.directory import RunDir, RunDirError, RunDirInUse

STARTED = 1_700_000_000.0


def test_a_file_is_not_a_run_dir(tmp_path: Path) -> None:
    (tmp_path / "f").write_text("x")
    with pytest.raises(RunDirError) as caught:
        RunDir(tmp_path / "f").create()
    assert str(caught.value) == (f"run dir {tmp_path / 'f'}: is a file, not a directory (choose "
                                 "another --run-dir or remove the file)")


def test_a_path_through_a_file_is_one_clear_line(tmp_path: Path) -> None:
    (tmp_path / "f").write_text("x")
    with pytest.raises(RunDirError) as caught:
        RunDir(tmp_path / "f" / "run").create()
    assert "a part of its path is a file, not a directory (choose another --run-dir)" in str(
        caught.value)


def test_a_run_dir_that_holds_a_run_is_refused(tmp_path: Path) -> None:
    run_dir = RunDir(tmp_path / "run")
    run_dir.create()
    run_dir.events.write_text(json.dumps({"ts": STARTED, "event": "job_started",
                                          "job": "digits"}) + "\n")
    stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(STARTED))
    with pytest.raises(RunDirInUse) as caught:
        run_dir.check()
    assert str(caught.value) == (f"run dir {run_dir.path}: already holds a run (job digits, "
                                 f"started {stamp}); choose another --run-dir or remove it")
    with pytest.raises(RunDirInUse):
        run_dir.create()


def test_an_unreadable_previous_run_is_still_refused(tmp_path: Path) -> None:
    run_dir = RunDir(tmp_path)
    run_dir.events.write_text("garbage\n")
    with pytest.raises(RunDirInUse) as caught:
        run_dir.create()
    assert "already holds a run (job unknown); choose another --run-dir" in str(caught.value)


def test_an_empty_events_file_holds_no_run(tmp_path: Path) -> None:
    """What a run that could not write its first event (a full disk) leaves: reusable."""
    run_dir = RunDir(tmp_path)
    run_dir.events.touch()
    run_dir.create()
    assert run_dir.events.read_text() == ""


@pytest.mark.parametrize(("code", "words"), [
    (errno.ENOSPC, "no space left on device (free some space or choose another --run-dir)"),
    (errno.EDQUOT, "disk quota exceeded (free some space"),
    (errno.EROFS, "read-only file system (choose a --run-dir on a writable file system)"),
    (errno.EACCES, "permission denied (choose a --run-dir you can write to)"),
    (errno.EIO, "Input/output error (check the directory or choose another --run-dir)"),
])
def test_os_errors_in_words(code: int, words: str) -> None:
    error = RunDirError.from_os_error(Path("/r"), OSError(code, os.strerror(code)))
    assert str(error).startswith("run dir /r: ") and words in str(error)
    assert error.exit_code == 1


def test_which_errors_are_the_run_dirs(tmp_path: Path) -> None:
    run_dir = RunDir(tmp_path / "run")
    inside = OSError(errno.EACCES, "denied", str(tmp_path / "run" / "attempt-0" / "x.log"))
    outside = OSError(errno.EACCES, "denied", str(tmp_path / "ports" / "lock"))
    assert run_dir.caused(inside) and not run_dir.caused(outside)
    assert run_dir.caused(OSError(errno.ENOSPC, "full"))  # a write to an open file
    assert not run_dir.caused(BrokenPipeError(errno.EPIPE, "pipe"))  # an agent, not the disk


def test_a_summary_that_cannot_be_written_leaves_no_partial_file(tmp_path: Path) -> None:
    run_dir = RunDir(tmp_path)
    (tmp_path / "summary.json").mkdir()  # os.replace onto a directory fails
    with pytest.raises(OSError):  # noqa: PT011 - whichever error the platform gives
        run_dir.write_summary({"status": "failed"})
    assert not (tmp_path / "summary.json.tmp").exists()
