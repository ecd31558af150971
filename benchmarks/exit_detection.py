"""Failure detection of ``tfcluster local``: how soon a task's own exit becomes ``task_failed``.

``tfcluster local -n 4`` runs an entrypoint in which ``worker:2`` sleeps briefly, writes
``time.time()`` to a file and ``os._exit(3)``\\ s while the others sleep 30 s (tfcluster stops them
itself when ``worker:2`` fails). From ``events.jsonl`` it reads the ``task_failed`` event: its
``detection_latency_ms`` (task exit as the agent saw it -> coordinator recorded it) and, as an
independent end-to-end figure, its ``ts`` minus the time the task wrote just before exiting.
Run by ``launch_overhead.py`` (``--detect-runs``) and ``run_all.py``.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from common import (
    RUN_TIMEOUT_S,
    BenchmarkError,
    Event,
    Tfcluster,
    failure_reason,
    percentile,
    progress,
    read_events,
    scratch,
)
from targets import DETECTION_P95_MS

from launcher.run.events import EventType

FAILING_TASK = "worker:2"
FAILING_EXIT_CODE = 3

#: worker:2 sleeps argv[2] s, writes time.time() to argv[1] and exits 3; the others sleep 30 s.
FAIL_CODE = """\
import os, sys, time
if os.environ.get('TFCLUSTER_TASK') == 'worker:2':
    time.sleep(float(sys.argv[2]))
    fd = os.open(sys.argv[1], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    t = time.time()
    os.write(fd, (repr(t) + '\\n').encode())
    os._exit(3)
time.sleep(30)
"""


@dataclass(frozen=True)
class DetectionSample:
    detection_latency_ms: float  # the task_failed event's own figure (agent saw exit -> recorded)
    end_to_end_ms: float  # task_failed ts - time the task wrote just before os._exit
    exit_to_agent_ms: float  # died_at (the agent's clock at reaping) - time the task wrote
    cli_exit_s: float  # from the task's exit until tfcluster itself had exited


def detection_run(cli: Tfcluster, work: Path, sleep_s: float) -> DetectionSample:
    run_dir, stamp = work / "run", work / "exit-stamp"
    args = ["local", "-n", "4", "--quiet", "--run-dir", str(run_dir), "--",
            sys.executable, "-c", FAIL_CODE, str(stamp), str(sleep_s)]
    run = cli.run(args, work, timeout_s=RUN_TIMEOUT_S, run_dir=run_dir)
    if run.exit_code != FAILING_EXIT_CODE:
        raise BenchmarkError(f"failure drill: tfcluster exited {run.exit_code}, expected "
                             f"{FAILING_EXIT_CODE}: {failure_reason(run, run_dir)}")
    leftovers = cli.leftovers()
    if leftovers:
        raise BenchmarkError(f"failure drill: tfcluster left {len(leftovers)} process(es) "
                             f"running: {[p.pid for p in leftovers]}")
    failed = [e for e in read_events(run_dir) if e.get("event") == EventType.TASK_FAILED]
    if [e.get("task") for e in failed] != [FAILING_TASK]:
        raise BenchmarkError(f"failure drill: expected one task_failed for {FAILING_TASK}, got "
                             f"{[e.get('task') for e in failed]}")
    event: Event = failed[0]
    exited_at = float(stamp.read_text(encoding="utf-8").split()[0])
    return DetectionSample(
        detection_latency_ms=float(event["detection_latency_ms"]),
        end_to_end_ms=(float(event["ts"]) - exited_at) * 1000,
        exit_to_agent_ms=(float(event["died_at"]) - exited_at) * 1000,
        cli_exit_s=run.ended_at - exited_at,
    )


def measure_detection(cli: Tfcluster, runs: int, tmp: Path, sleep_s: float, *,
                      errors: list[str]) -> list[DetectionSample]:
    """The samples of the runs that behaved; the others' reasons are appended to ``errors``."""
    samples: list[DetectionSample] = []
    for index in range(runs):
        with scratch(tmp, "detect-") as work:
            try:
                samples.append(detection_run(cli, work, sleep_s))
            except BenchmarkError as exc:
                errors.append(str(exc))
                progress(f"detection run {index + 1}/{runs}: {exc}")
                cli.kill_leftovers()
                continue
        last = samples[-1]
        progress(f"detection run {index + 1}/{runs}: detection_latency_ms "
                 f"{last.detection_latency_ms:.2f}, end-to-end {last.end_to_end_ms:.2f} ms")
    return samples


def detection_table(samples: Sequence[DetectionSample], errors: Sequence[str]) -> list[str]:
    rows: list[tuple[str, list[float], str]] = [
        ("`detection_latency_ms` (agent saw exit -> coordinator recorded)",
         [s.detection_latency_ms for s in samples], f"p95 {DETECTION_P95_MS.text}"),
        ("end-to-end (task `time.time()` before `os._exit` -> `task_failed` ts)",
         [s.end_to_end_ms for s in samples], ""),
        ("part of it: task exit -> agent reaped it (`died_at`)",
         [s.exit_to_agent_ms for s in samples], ""),
        ("task exit -> tfcluster CLI exited (teardown of the sleepers)",
         [s.cli_exit_s * 1000 for s in samples], ""),
    ]
    lines = [
        f"### Failure detection (tfcluster local -n 4, {FAILING_TASK} exits {FAILING_EXIT_CODE}; "
        f"{len(samples)} runs)",
        "",
        "| metric | p50 (ms) | p95 (ms) | max (ms) | target |",
        "|---|---:|---:|---:|---|",
    ]
    for name, values, target in rows:
        lines.append(f"| {name} | {percentile(values, 50):.2f} | {percentile(values, 95):.2f} "
                     f"| {max(values):.2f} | {target} |")
    if errors:
        lines.append("")
        lines += [f"- failed run (not counted): {error}" for error in errors]
    return lines


def detection_verdict(samples: Sequence[DetectionSample]) -> str:
    p95 = percentile([s.detection_latency_ms for s in samples], 95)
    return (f"{DETECTION_P95_MS.what} {DETECTION_P95_MS.text}: {p95:.2f} ms -> "
            f"{DETECTION_P95_MS.verdict(p95)}")
