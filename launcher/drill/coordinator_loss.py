"""``kill-coordinator``: SIGKILL tfcluster itself mid-run, check that no task outlives it, and
continue the job with ``tfcluster run --resume RUN_DIR``.

The coordinator must be a process of its own for this, so the drill runs it as a child
(``python -m launcher drill SPEC --in-child --fault ...``, which injects the scenario's other
faults), watches its ``events.jsonl`` until the trigger is due (``at-step=N``: a task reported
step N; ``after=S``: S seconds after the first step, or after the attempt started while none was
reported), SIGKILLs it, waits up to :data:`TASKS_GONE_WITHIN_S` for every task pid recorded in the
events to be gone (killing and reporting any that is not; only tasks on this machine can be looked
at), then resumes the run in the same run directory and waits for it to end. Its trigger is read
from ``events.jsonl``, where progress is written at most once a second per task: an ``at-step``
fires up to a second of steps late (the figures use the step really reached).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from launcher.drill.faults import Fault, TriggerKind
from launcher.drill.figures import last_step_before
from launcher.run.directory import EVENTS_FILE
from launcher.run.event_log import read_events
from launcher.run.events import EventType, FaultInjected
from launcher.spec.loading import relocatable
from launcher.spec.model import ClusterSpec
from worker.wire.safe_open import open_appending_bytes, read_text, replace_file

#: Most bytes of the coordinator's log that are searched for its --resume complaint.
_MAX_LOG_BYTES = 16 * 1024 * 1024

#: Every task must be gone this soon after the coordinator is SIGKILLed.
TASKS_GONE_WITHIN_S = 5.0
#: How often the child's events and the tasks' pids are looked at.
POLL_S = 0.05


@dataclass(frozen=True)
class ChildRunner:
    """Starts ``python -m launcher ARGS...`` as the user would (quiet; output to a file)."""

    cwd: Path
    python: str = sys.executable

    def start(self, args: Sequence[str], log: Path) -> subprocess.Popen[bytes]:
        with open_appending_bytes(log) as out:
            return subprocess.Popen([self.python, "-m", "launcher", *args], cwd=self.cwd,
                                    stdout=out, stderr=subprocess.STDOUT,
                                    start_new_session=False)


@dataclass
class LossReport:
    exit_code: int
    killed: bool
    tasks_gone_s: float | None
    survivors: list[int]
    resume_exit_code: int | None
    event: dict[str, Any] | None  # the fault as injected (it is not in events.jsonl)
    problems: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {"killed": self.killed, "tasks_gone_s": self.tasks_gone_s,
                "survivors": self.survivors, "resume_exit_code": self.resume_exit_code}


def _events(run_dir: Path) -> list[dict[str, Any]]:
    path = run_dir / EVENTS_FILE
    if not path.exists():
        return []
    return read_events(path, torn_ok=True)


def _due(events: Sequence[dict[str, Any]], fault: Fault, now: float) -> bool:
    progress = [e for e in events if e["event"] == EventType.TASK_PROGRESS]
    if fault.trigger.kind is TriggerKind.AT_STEP:
        return any(int(e["step"]) >= fault.trigger.value for e in progress)
    starts = [float(e["ts"]) for e in events if e["event"] == EventType.ATTEMPT_STARTED]
    if not starts:
        return False
    since = float(progress[0]["ts"]) if progress else starts[0]
    return now >= since + (fault.trigger.value if fault.trigger.kind is TriggerKind.AFTER else 0)


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def _wait_gone(pids: Sequence[int], within: float) -> tuple[float | None, list[int]]:
    began = time.monotonic()
    while True:
        alive = [pid for pid in pids if _alive(pid)]
        elapsed = time.monotonic() - began
        if not alive:
            return elapsed, []
        if elapsed > within:
            for pid in alive:  # the drill leaves nothing behind, even when tfcluster did
                os.kill(pid, signal.SIGKILL)
            return None, alive
        time.sleep(POLL_S)


def run_with_coordinator_loss(child: ChildRunner, spec: ClusterSpec, run_dir: Path, *,
                              in_job: Sequence[Fault], fault: Fault, seed: int,
                              horizon: int) -> LossReport:
    run_dir.mkdir(parents=True, exist_ok=True)
    spec_file = run_dir / "drill-spec.json"
    # its env may hold secrets: readable by its owner only from the start
    # with its relative paths made absolute: they start at the spec's own directory, not this one's
    replace_file(spec_file, json.dumps(relocatable(spec)).encode(), 0o600)
    args = ["drill", str(spec_file), "--in-child", "--seed", str(seed), "--random-horizon",
            str(horizon), "--run-dir", str(run_dir), "--quiet", *(f"--fault={f}" for f in in_job)]
    log = run_dir / "drill-coordinator.log"  # what the coordinator and its resume printed
    proc = child.start(args, log)
    killed_at = None
    while proc.poll() is None:
        if _due(_events(run_dir), fault, time.time()):
            killed_at = time.time()
            proc.send_signal(signal.SIGKILL)
            break
        time.sleep(POLL_S)
    code = proc.wait()
    events = _events(run_dir)
    # only local tasks' pids can be looked at here (a remote agent is checked by its own EOF)
    pids = [int(e["pid"]) for e in events if e["event"] == EventType.TASK_STARTED and e.get("pid")
            and spec.is_local(str(e.get("host", "")))]
    attempt = max((int(e["attempt"]) for e in events if "attempt" in e), default=0)
    if killed_at is None:
        report = LossReport(code, False, None, [], None, None)
        report.problems.append(f"{fault} was never injected: the job ended (exit code {code}) "
                               "before its trigger")
        return report
    gone_s, survivors = _wait_gone(pids, TASKS_GONE_WITHIN_S)
    injected = FaultInjected(
        attempt=attempt, fault=str(fault), action=fault.action.value,
        trigger=str(fault.trigger), task="", host="",
        tasks=sorted({str(e["task"]) for e in events if e["event"] == EventType.TASK_STARTED
                      and int(e["attempt"]) == attempt}),
        signal="SIGKILL", step=last_step_before(events, killed_at),
        detail=(f"{len(survivors)} task(s) survived it" if survivors
                else "every task gone" if gone_s is None
                else f"every task gone {gone_s:.2f} s after it"))
    event = {"ts": killed_at, "event": injected.event_name, **injected.record()}
    report = LossReport(code, True, gone_s, survivors, None, event)
    if survivors:
        report.problems.append(f"task pid(s) {survivors} outlived the coordinator by more than "
                               f"{TASKS_GONE_WITHIN_S:g} s (killed by the drill)")
    resumed = child.start(["run", "--resume", str(run_dir), "--quiet"], log)
    report.resume_exit_code = report.exit_code = resumed.wait()
    if report.resume_exit_code == 2 and "--resume" in read_text(log, _MAX_LOG_BYTES):
        report.problems.append("tfcluster run --resume RUN_DIR is not available: see "
                               f"{log}")
    return report
