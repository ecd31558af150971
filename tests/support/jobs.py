"""Helpers for tests that run real tfcluster jobs: specs, the CLI as a subprocess, events, and
finding every process of a job (they all carry a unique marker in their environment)."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import psutil
import yaml

from tests.support import procs

REPO = Path(__file__).resolve().parents[2]
FAKE_TRAINER = REPO / "tests" / "support" / "fake_trainer.py"
#: Set in the CLI's environment, inherited by agents and tasks (not TFCLUSTER_*: tfcluster
#: strips its own variables from what it passes on).
MARK_VAR = "TFC_TEST_MARK"

Event = dict[str, Any]


def fake_spec(name: str, *, tasks: list[dict[str, Any]] | None = None, args: Sequence[str] = (),
              **fields: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "name": name,
        "entrypoint": {"script": str(FAKE_TRAINER), "args": list(args)},
        "tasks": tasks or [{"type": "worker", "count": 3}],
        "restart": {"max_restarts": 0, "backoff_s": 0.1},
        "health": {"grace_period_s": 3},
    }
    spec.update(fields)
    return spec


def write_spec(directory: Path, spec: dict[str, Any]) -> Path:
    path = directory / f"{spec['name']}.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


def read_events(run_dir: Path) -> list[Event]:
    path = run_dir / "events.jsonl"
    if not path.exists():
        return []
    lines = path.read_text().splitlines()
    return [json.loads(line) for line in lines if line.endswith("}")]


class Job:
    """``tfcluster`` run as a user runs it: a subprocess, output captured to files."""

    def __init__(self, argv: list[str], run_dir: Path, cwd: Path, *, merged: bool = False) -> None:
        """``merged``: stderr goes to the stdout file too (``2>&1``), in the order written."""
        self.run_dir = run_dir
        self.mark = uuid.uuid4().hex
        self.stdout_path = run_dir.parent / f"{run_dir.name}.stdout"
        self.stderr_path = run_dir.parent / f"{run_dir.name}.stderr"
        env = {**os.environ, MARK_VAR: self.mark, "NO_COLOR": "1"}
        with self.stdout_path.open("wb") as out, self.stderr_path.open("wb") as err:
            verb, *rest = argv  # options before the command that `local` takes after --
            self.proc = subprocess.Popen([sys.executable, "-m", "launcher", verb,
                                          "--run-dir", str(run_dir), *rest],
                                         stdout=out, stderr=subprocess.STDOUT if merged else err,
                                         cwd=cwd, env=env)

    @property
    def stdout(self) -> str:
        return self.stdout_path.read_text()

    @property
    def stderr(self) -> str:
        return self.stderr_path.read_text()

    def events(self) -> list[Event]:
        return read_events(self.run_dir)

    def wait(self, timeout: float = 60) -> int:
        return self.proc.wait(timeout)

    def wait_event(self, match: Callable[[Event], bool], timeout: float = 30) -> Event:
        """The first event that matches, waiting for it to be written (deadline: ``timeout``)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for event in self.events():
                if match(event):
                    return event
            if self.proc.poll() is not None:
                for event in self.events():
                    if match(event):
                        return event
                raise AssertionError(f"tfcluster exited {self.proc.returncode} before the event; "
                                     f"stderr:\n{self.stderr}")
            time.sleep(0.02)
        raise AssertionError(f"no matching event within {timeout}s; events: {self.events()}")

    def processes(self) -> list[psutil.Process]:
        """Every living process of this job: the CLI, its agents, tasks and their children."""
        return processes_marked(self.mark)

    def kill_all(self) -> None:
        procs.kill_all(self.processes(), timeout=None)  # the CLI is reaped below, by its Popen
        with contextlib.suppress(ProcessLookupError):
            self.proc.kill()
        self.proc.wait(10)


def processes_marked(mark: str) -> list[psutil.Process]:
    return procs.with_env(MARK_VAR, mark)


def wait_until_gone(mark: str, timeout: float) -> list[psutil.Process]:
    """Wait up to ``timeout`` for every process of a job to end; returns those still alive."""
    return procs.wait_until_empty(lambda: processes_marked(mark), timeout)


def signal_tfcluster(job: Job, sig: signal.Signals) -> None:
    job.proc.send_signal(sig)


def by(event_type: str, **fields: Any) -> Callable[[Event], bool]:
    def match(event: Event) -> bool:
        return event.get("event") == event_type and all(event.get(k) == v
                                                        for k, v in fields.items())
    return match


@contextlib.contextmanager
def running(argv: list[str], run_dir: Path, cwd: Path, *, merged: bool = False) -> Iterator[Job]:
    """A job that is always cleaned up, whatever the test does."""
    job = Job(argv, run_dir, cwd, merged=merged)
    try:
        yield job
    finally:
        if job.proc.poll() is None:
            job.kill_all()
        procs.kill_all(job.processes(), timeout=None)


def wait_for_checkpoint(directory: Path, step: int, job: Job, timeout: float = 30) -> None:
    """Until the chief's state file names ``ckpt-<step>`` (written after its data and index)."""
    deadline = time.monotonic() + timeout
    state = directory / "checkpoint"
    while f'"ckpt-{step}"' not in (state.read_text() if state.exists() else ""):
        if job.proc.poll() is not None or time.monotonic() > deadline:
            raise AssertionError(f"no ckpt-{step} in {directory}; stderr:\n{job.stderr}")
        time.sleep(0.01)  # polling the directory for the file; not synchronisation by time


def latest_step(checkpoints: Path) -> int:
    """The step of the chief's latest checkpoint in ``checkpoints`` (0: none yet)."""
    state = checkpoints / "checkpoint"
    text = state.read_text() if state.exists() else ""
    found = re.search(r'^model_checkpoint_path: "ckpt-(\d+)"', text, re.MULTILINE)
    return int(found.group(1)) if found else 0


def run_status(run_dir: Path) -> str:
    """What ``tfcluster status RUN_DIR`` prints (it must exit 0)."""
    done = subprocess.run([sys.executable, "-m", "launcher", "status", str(run_dir)], cwd=REPO,
                          capture_output=True, text=True, timeout=30, check=False)
    assert done.returncode == 0, done.stderr
    return done.stdout
