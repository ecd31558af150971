"""A verdict on correctness: the job's final result line, compared with a baseline's.

Any task may print its result as a line ``weights_sha256=HEX`` (the digits example) or
``tfcluster-result: ANYTHING`` (any script); the result of a run is what the tasks of its last
attempt printed (they must agree). A drill passes only if its result equals the baseline's: a run
without faults of the same spec.

Unless the job ran at another size on the way: a job placed from a host pool may run smaller when a
host is lost (and grow again), which changes what it computes, so when its attempts ran at
different sizes (``attempt_placed`` events' ``workers``; a run without them has one size) its
result is not compared with the baseline (:attr:`Check.RESIZED`) and the sizes per attempt are
reported instead.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from launcher.run.pool_events import AttemptPlaced

_RESULT = re.compile(r"^(?:weights_sha256=(\S+)|tfcluster-result:\s*(.+?))\s*$", re.MULTILINE)
_ATTEMPT_DIR = re.compile(r"^attempt-(\d+)$")


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
        found = _RESULT.findall(log.read_text(encoding="utf-8", errors="replace"))
        if found:
            sha, line = found[-1]
            values.add(f"weights_sha256={sha}" if sha else line)
    return " | ".join(sorted(values)) if values else None


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

    @property
    def failed(self) -> bool:
        return self.check in (Check.DIFFERS, Check.MISSING)

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


def compare(result: str | None, baseline: str | None, sizes: Sequence[int] = ()) -> Verdict:
    """The result against the baseline's, unless the job's attempts ran at different ``sizes``."""
    ran = tuple(sizes)
    if baseline is None:
        return Verdict(Check.UNCHECKED, result, baseline, ran)
    if result is None:
        return Verdict(Check.MISSING, result, baseline, ran)
    if len(set(ran)) > 1:
        return Verdict(Check.RESIZED, result, baseline, ran)
    return Verdict(Check.MATCH if result == baseline else Check.DIFFERS, result, baseline, ran)
