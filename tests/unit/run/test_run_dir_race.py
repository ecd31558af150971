"""Runs started at the same moment in one directory (issue 25, item 15): each default run
directory is created by one run alone (``mkdir``, never an ``exists()`` check), and a run that
finds its directory taken by a live run refuses it without deleting that run's files or naming
that run's coordinator as its own."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from launcher.run.directory import EVENTS_FILE, RunDir, RunDirError, new_run_dir

NOW = 1_700_000_000.0
RUNS = 10


def test_runs_started_in_the_same_second_each_get_a_directory_of_their_own(tmp_path: Path) -> None:
    barrier = threading.Barrier(RUNS)
    got: list[Path] = []
    lock = threading.Lock()

    def start() -> None:
        barrier.wait(10)
        path = new_run_dir("job", base=str(tmp_path / "runs"), now=NOW)
        RunDir(path).create()
        with lock:
            got.append(path)

    threads = [threading.Thread(target=start) for _ in range(RUNS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert len(got) == RUNS and len(set(got)) == RUNS
    assert all((path / EVENTS_FILE).is_file() for path in got)
    assert sorted(p.name for p in (tmp_path / "runs").iterdir()) == sorted(p.name for p in got)


def test_a_second_run_into_a_live_runs_directory_leaves_its_files_alone(tmp_path: Path) -> None:
    first = RunDir(tmp_path / "run")
    first.create()  # its events.jsonl is still empty: it has not written its first event yet
    fd = os.open(first.events, os.O_RDONLY)
    try:
        with pytest.raises(RunDirError) as refused:
            RunDir(tmp_path / "run").create()
        assert os.fstat(fd).st_nlink == 1  # the first run's file: not deleted
        assert os.path.samestat(os.fstat(fd), os.stat(first.events))  # nor replaced
    finally:
        os.close(fd)
    message = str(refused.value)
    assert "another tfcluster" in message and "--run-dir" in message
    assert "resum" not in message and "kill" not in message  # not this run's own coordinator
    first.release()


def test_a_run_dir_left_empty_by_a_dead_run_is_still_usable(tmp_path: Path) -> None:
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / EVENTS_FILE).touch()  # a run that died before its first event
    run_dir = RunDir(tmp_path / "run")
    run_dir.create()
    run_dir.release()


def test_the_name_is_the_jobs_and_the_time(tmp_path: Path) -> None:
    first = new_run_dir("digits", base=str(tmp_path), now=NOW)
    second = new_run_dir("digits", base=str(tmp_path), now=NOW)
    assert first.is_dir() and second.is_dir()
    assert second.name == f"{first.name}-2" and first.name.startswith("digits-")
