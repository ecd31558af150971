"""A run directory written as a coordinator writes it (``spec.json``, ``events.jsonl`` through the
real :class:`~launcher.run.event_log.EventLog`, task logs), without running a job: for the tests
of what ``status``, ``logs`` and ``--resume`` make of a run dir that was cut, edited or grown."""

from __future__ import annotations

import json
from pathlib import Path

from launcher.run.directory import RunDir
from launcher.run.event_log import EventLog
from launcher.run.events import (
    AttemptStarted,
    CheckpointFound,
    Event,
    JobFailed,
    JobRestarting,
    JobStarted,
    TaskFailed,
    TaskProgress,
    TaskStarted,
)
from launcher.run.failures import FailureKind, TaskFailure
from launcher.run.stored_spec import stored_spec
from launcher.spec.loading import spec_from_dict
from tests.support.jobs import fake_spec

TASKS = ("worker:0", "worker:1")


def lost_run(run_dir: Path, checkpoint_dir: Path, *, step: int = 25) -> list[Event]:
    """The events of a run whose coordinator died while attempt 1 ran (attempt 0 failed at
    ``step`` and was restarted from checkpoint 20), written to ``run_dir`` with its spec."""
    spec = spec_from_dict(fake_spec("hostile", tasks=[{"type": "worker", "count": 2}],
                                    checkpoint={"dir": str(checkpoint_dir)},
                                    restart={"max_restarts": 3, "backoff_s": 0.1}),
                          source="test")
    created = RunDir(run_dir, stored_spec=stored_spec(spec, str(run_dir.parent)))
    created.create()
    created.release()
    failure = TaskFailure(task="worker:1", host="localhost", attempt=0, kind=FailureKind.EXITED,
                          died_at=105.0, observed_at=105.1, exit_code=3, stderr_tail=("boom",))
    events: list[Event] = [
        JobStarted("hostile", str(run_dir), list(TASKS), ["localhost"]),
        AttemptStarted(0, None, None, {task: 2000 + i for i, task in enumerate(TASKS)}),
        *(TaskStarted(0, task, "localhost", 100 + i, str(run_dir / "attempt-0" / f"{i}.log"))
          for i, task in enumerate(TASKS)),
        *(TaskProgress(0, task, step, {"loss": 0.5}, False) for task in TASKS),
        TaskFailed(failure),
        CheckpointFound(0, 20, str(checkpoint_dir / "ckpt-20"), str(checkpoint_dir), ()),
        JobRestarting(1, "worker:1 exited 3", 0.1, True, 20, str(checkpoint_dir / "ckpt-20")),
        AttemptStarted(1, 20, str(checkpoint_dir / "ckpt-20"),
                       {task: 3000 + i for i, task in enumerate(TASKS)}),
        *(TaskStarted(1, task, "localhost", 200 + i, str(run_dir / "attempt-1" / f"{i}.log"))
          for i, task in enumerate(TASKS)),
        *(TaskProgress(1, task, step + 3, {"loss": 0.4}, False) for task in TASKS),
    ]
    write_events(run_dir, events, start=100.0)
    for attempt in (0, 1):
        (run_dir / f"attempt-{attempt}").mkdir(exist_ok=True)
        for i, task in enumerate(TASKS):
            (run_dir / f"attempt-{attempt}" / f"worker-{i}.log").write_text(
                f"{task} attempt {attempt} line 1\n{task} attempt {attempt} line 2\n")
    return events


def failed_run(run_dir: Path, checkpoint_dir: Path) -> None:
    """A run that failed on its own (restarts used up): ``--resume`` refuses it."""
    lost_run(run_dir, checkpoint_dir)
    write_events(run_dir, [JobFailed("hostile", "worker:1 exited 3; no restarts left", 3, 2, None)],
                 start=200.0)


def write_events(run_dir: Path, events: list[Event], *, start: float) -> None:
    """Append ``events`` to the run's ``events.jsonl``, one second apart from ``start``."""
    clock = iter(range(10_000))
    log = EventLog(run_dir / "events.jsonl", clock=lambda: start + next(clock))
    try:
        for event in events:
            log.emit(event)
    finally:
        log.close()


def event_lines(run_dir: Path) -> list[str]:
    return (run_dir / "events.jsonl").read_text().splitlines()


def replace_line(run_dir: Path, number: int, record: object) -> None:
    """Line ``number`` (1-based) of ``events.jsonl`` replaced by ``record`` as JSON."""
    lines = event_lines(run_dir)
    lines[number - 1] = json.dumps(record)
    (run_dir / "events.jsonl").write_text("\n".join(lines) + "\n")
