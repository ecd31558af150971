"""``tfcluster drill`` without ``--run-dir`` claims a directory of its own: drills started in the
same second in one directory never share one (the name was once picked by an ``exists()`` check,
and two drills wrote into the same baseline)."""

from __future__ import annotations

import argparse
import os
import threading
from pathlib import Path

import pytest

from launcher.cli import drill_verb


def test_drills_started_at_the_same_moment_get_a_directory_each(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    args = argparse.Namespace(run_dir=None)
    claimed: list[Path] = []
    start = threading.Barrier(10)

    def claim() -> None:
        start.wait(5)
        claimed.append(drill_verb._run_dir(args, "digits"))

    threads = [threading.Thread(target=claim) for _ in range(10)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)
    assert len(set(claimed)) == 10, claimed
    assert all(path.is_dir() and path.parent == tmp_path / "runs" for path in claimed)
    assert all(path.name.startswith("drill-digits-") for path in claimed)
    assert sorted(os.listdir(tmp_path / "runs")) == sorted(path.name for path in claimed)


def test_a_given_run_dir_is_taken_as_it_is(tmp_path: Path) -> None:
    wanted = tmp_path / "mine"
    assert drill_verb._run_dir(argparse.Namespace(run_dir=str(wanted)), "digits") == wanted
    assert not wanted.exists()  # the drill creates it when it starts
