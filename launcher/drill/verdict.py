"""A verdict on correctness: what the job ended with (its final result line and its final step),
compared with a baseline's.

Any task may print its result as a line ``weights_sha256=HEX`` (the digits example) or
``tfcluster-result: ANYTHING`` (any script); the result of a run is what the tasks of its last
attempt printed (they must agree). A drill passes only if its result equals the baseline's: a run
without faults of the same spec. Its final step is the last step the task that writes checkpoints
(the chief; worker 0 without one) reported, from ``summary.json`` (``events.jsonl`` holds at most
one progress event a second per task, so rarely the last step); when the baseline's is known, the
drill's must equal it: the job completed all its steps.

Unless the job ran at another size on the way: a job placed from a host pool may run smaller when a
host is lost (and grow again), which changes what it computes, so when its attempts ran at
different sizes (``attempt_placed`` events' ``workers``; a run without them has one size) its
result is not compared with the baseline (:attr:`Check.RESIZED`) and the sizes per attempt are
reported instead.
"""

from __future__ import annotations

import enum
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from launcher.run.directory import SUMMARY_FILE
from launcher.run.pool_events import AttemptPlaced
from worker.wire.safe_open import open_reading
from worker.wire.tfconfig import TaskId, checkpoint_writer

_RESULT = re.compile(r"^(?:weights_sha256=(\S+)|tfcluster-result:\s*(.+?))\s*$", re.MULTILINE)
_ATTEMPT_DIR = re.compile(r"^attempt-(\d+)$")
#: summary.json is tfcluster's own, but read back as untrusted: no more than this.
_MAX_SUMMARY_BYTES = 64 * 1024 * 1024


def final_result(run_dir: Path) -> str | None:
    """The result line the last attempt's tasks printed (the last one of each task's log), or
    None if none did; tasks that disagree give every value, sorted, joined by `` | ``."""
    attempts = [(int(m.group(1)), p) for p in run_dir.glob("attempt-*")
                if (m := _ATTEMPT_DIR.match(p.name)) and p.is_dir()]
    if not attempts:
        return None
    last = max(attempts)[1]
    values = set()
    for log in sorted(last.glob("*.log")):
        try:  # a regular file: not through a symlink a task planted, never a FIFO
            with open_reading(log) as handle:
                found = _RESULT.findall(handle.read().decode("utf-8", "replace"))
        except OSError:
            continue
        if found:
            sha, line = found[-1]
            values.add(f"weights_sha256={sha}" if sha else line)
    return " | ".join(sorted(values)) if values else None


def final_step(run_dir: Path) -> int | None:
    """The last step the chief (worker 0 without one) reported, from the run's ``summary.json``
    (its ``health`` section); None when the run has no such file or the task reported no step."""
    try:
        with open_reading(run_dir / SUMMARY_FILE) as handle:
            summary = json.loads(handle.read(_MAX_SUMMARY_BYTES))
        tasks = summary["health"]["tasks"]
        names = {TaskId.parse(str(name)): name for name in tasks}
        writer = checkpoint_writer(names)
        step = None if writer is None else tasks[names[writer]]["step"]
    except (OSError, ValueError, KeyError, TypeError):  # TFConfigError is a ValueError
        return None
    return step if isinstance(step, int) and not isinstance(step, bool) else None


@dataclass(frozen=True)
class Baseline:
    """What a run without faults of the spec ended with."""

    result: str | None
    steps: int | None = None  # its final step (:func:`final_step`), when known


def baseline_of(run_dir: Path) -> Baseline:
    return Baseline(final_result(run_dir), final_step(run_dir))


def attempt_sizes(events: Sequence[Mapping[str, Any]]) -> tuple[int, ...]:
    """The training tasks each attempt ran with, in attempt order (an attempt placed more than
    once: its last placement), from ``attempt_placed`` events; () when the run has none."""
    sizes: dict[int, int] = {}
    for event in events:
        if event.get("event") != AttemptPlaced.TYPE:
            continue
        try:
            sizes[int(event["attempt"])] = int(event["workers"])
        except (KeyError, TypeError, ValueError):
            continue  # a record from a torn or foreign line: not a size
    return tuple(sizes[attempt] for attempt in sorted(sizes))


class Check(enum.StrEnum):
    MATCH = "match"
    DIFFERS = "DIFFERS"
    MISSING = "missing"          # the baseline printed a result, the drill's job did not
    UNCHECKED = "unchecked"      # no baseline (or it printed no result)
    RESIZED = "resized"          # the job ran at another size: not compared with the baseline


@dataclass(frozen=True)
class Verdict:
    check: Check
    result: str | None
    baseline: str | None
    sizes: tuple[int, ...] = ()  # training tasks per attempt, when the run recorded them
    steps: int | None = None  # the job's final step (:func:`final_step`), when known
    expected_steps: int | None = None  # the baseline's, when known

    @property
    def failed(self) -> bool:
        return self.check in (Check.DIFFERS, Check.MISSING)

    @property
    def steps_differ(self) -> bool:
        """The job ended at another step than the baseline (not compared when it changed size,
        nor when either is unknown)."""
        return (self.steps is not None and self.expected_steps is not None
                and not self.resized and self.steps != self.expected_steps)

    @property
    def resized(self) -> bool:
        return len(set(self.sizes)) > 1

    @property
    def note(self) -> str | None:
        """What a reader must know beside the check: the sizes, when the job changed size."""
        if not self.resized:
            return None
        sizes = f"sizes per attempt: {', '.join(str(n) for n in self.sizes)}"
        if self.check is Check.RESIZED:
            return (f"{sizes} — result not compared with the baseline: the job ran at another "
                    "size")
        return sizes


def compare(result: str | None, baseline: str | None, sizes: Sequence[int] = (), *,
            steps: int | None = None, expected_steps: int | None = None) -> Verdict:
    """The result against the baseline's, unless the job's attempts ran at different ``sizes``;
    the final ``steps`` are carried for :attr:`Verdict.steps_differ`."""
    ran = tuple(sizes)
    if baseline is None:
        check = Check.UNCHECKED
    elif result is None:
        check = Check.MISSING
    elif len(set(ran)) > 1:
        check = Check.RESIZED
    else:
        check = Check.MATCH if result == baseline else Check.DIFFERS
    return Verdict(check, result, baseline, ran, steps, expected_steps)
