"""Helpers for end-to-end tests that run real TensorFlow MWMS jobs under ``tfcluster run``.

Every TF process costs seconds of start-up and ~0.5 GiB, so tests start few jobs, wait on files
and events with deadlines (never a bare sleep), and always check that nothing is left running.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import re
import signal
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.support.jobs import REPO, Event, Job, by, read_events, running, wait_until_gone
from tests.support.tiers import REQUIRE_ENV

#: Per test: job start-up alone is ~5 s per TF process, and the host may be busy.
TEST_TIMEOUT_S = 300
#: A job that has not finished in this long will not.
JOB_TIMEOUT_S = 240

#: Skips without TensorFlow, except under ``.ci/run`` (``REQUIRE_ENV``): there the tests run and
#: fail, as every tier that cannot run does (``make test`` installs TensorFlow).
requires_tf = pytest.mark.skipif(
    (importlib.util.find_spec("tensorflow") is None or importlib.util.find_spec("sklearn") is None)
    and os.environ.get(REQUIRE_ENV) != "1",
    reason="needs tensorflow and scikit-learn (pip install -e '.[tf]')")

_HASH = re.compile(r"^weights_sha256=([0-9a-f]{64})$", re.MULTILINE)
_ACCURACY = re.compile(r"^test_accuracy=([0-9.]+)$", re.MULTILINE)


@dataclass(frozen=True)
class Finished:
    """A job that ran to its end: where its files are and how it ended."""

    run_dir: Path
    checkpoint_dir: Path
    exit_code: int
    stderr: str

    @property
    def events(self) -> list[Event]:
        return read_events(self.run_dir)

    def summary(self) -> dict[str, Any]:
        result: dict[str, Any] = json.loads((self.run_dir / "summary.json").read_text())
        return result

    def last_attempt(self) -> int:
        return max(int(e["attempt"]) for e in self.events if e["event"] == "attempt_started")

    def log(self, attempt: int, task: str) -> str:
        """The task's log (``task`` as in events, e.g. ``worker:1``)."""
        return (self.run_dir / f"attempt-{attempt}" / f"{task.replace(':', '-')}.log").read_text()

    def logs(self, attempt: int) -> dict[str, str]:
        tasks = sorted({e["task"] for e in self.events
                        if e["event"] == "task_started" and e["attempt"] == attempt})
        return {task: self.log(attempt, task) for task in tasks}

    def final_hash(self) -> str:
        """The trained weights' hash, the same on every task of the last attempt."""
        hashes = {task: _HASH.findall(text) for task, text in self.logs(self.last_attempt()).items()}
        assert all(len(found) == 1 for found in hashes.values()), hashes
        assert len({found[0] for found in hashes.values()}) == 1, hashes
        return str(next(iter(hashes.values()))[0])

    def accuracies(self) -> dict[str, float]:
        return {task: float(found[-1]) for task, text in self.logs(self.last_attempt()).items()
                if (found := _ACCURACY.findall(text))}

    def first_steps(self, attempt: int) -> set[int]:
        return {e["step"] for e in self.events if e["event"] == "task_progress"
                and e["attempt"] == attempt and e["first"]}


@contextlib.contextmanager
def tf_job(tmp_path: Path, argv: list[str], checkpoint_dir: Path) -> Iterator[Job]:
    """``tfcluster ARGV --checkpoint-dir C`` from the repository, TMPDIR in ``tmp_path`` (TF's
    autograph leaves files there), killed whatever happens; on a normal exit, checks that none of
    the job's processes outlive it."""
    tmp = tmp_path / "tmp"
    tmp.mkdir(exist_ok=True)
    argv = [*argv, "--checkpoint-dir", str(checkpoint_dir), "--quiet"]
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("TMPDIR", str(tmp))
        with running(argv, tmp_path / "run", REPO) as job:
            yield job
            job.wait(JOB_TIMEOUT_S)
            assert wait_until_gone(job.mark, 15) == [], "processes left behind"


def finished(job: Job, checkpoint_dir: Path) -> Finished:
    return Finished(job.run_dir, checkpoint_dir, job.wait(JOB_TIMEOUT_S), job.stderr)


def wait_while_running(job: Job, done: Callable[[], bool], what: str, timeout: float) -> None:
    """Wait until ``done()`` (deadline ``timeout``) while the job is still running; ``what``
    names the awaited condition in the error."""
    deadline = time.monotonic() + timeout
    while not done():
        if job.proc.poll() is not None:
            raise AssertionError(f"tfcluster exited {job.proc.returncode} before {what}:\n"
                                 f"{job.stderr}")
        if time.monotonic() > deadline:
            raise AssertionError(f"not {what} within {timeout}s")
        time.sleep(0.01)


def wait_for_file(job: Job, path: Path, timeout: float = 180) -> None:
    """Wait until ``path`` exists (deadline ``timeout``) while the job is still running."""
    wait_while_running(job, path.exists, f"{path} appeared", timeout)


def wait_for_spares(job: Job, tasks: tuple[str, ...], timeout: float = 120) -> None:
    """Wait until the local agent has said that the warm spare of each of ``tasks`` is ready
    (TensorFlow imported: its note in ``RUN_DIR/agents/localhost.log``); spares are filled once
    training is seen to run, and one still importing at a restart is not used."""
    log = job.run_dir / "agents" / "localhost.log"

    def ready() -> bool:
        text = log.read_text() if log.exists() else ""
        return all(re.search(rf"spare {re.escape(task)}: spare \d+ ready in ", text)
                   for task in tasks)

    wait_while_running(job, ready, f"the spares of {', '.join(tasks)} ready", timeout)


def signal_task(job: Job, task: str, sig: signal.Signals, attempt: int = 0) -> None:
    pid = job.wait_event(by("task_started", task=task, attempt=attempt), timeout=60)["pid"]
    os.kill(pid, sig)
