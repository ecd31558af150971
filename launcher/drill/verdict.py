"""A verdict on correctness: the job's final result line, compared with a baseline's.

Any task may print its result as a line ``weights_sha256=HEX`` (the digits example) or
``tfcluster-result: ANYTHING`` (any script); the result of a run is what the tasks of its last
attempt printed (they must agree). A drill passes only if its result equals the baseline's: a run
without faults of the same spec.
"""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass
from pathlib import Path

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


class Check(enum.StrEnum):
    MATCH = "match"
    DIFFERS = "DIFFERS"
    MISSING = "missing"          # the baseline printed a result, the drill's job did not
    UNCHECKED = "unchecked"      # no baseline (or it printed no result)


@dataclass(frozen=True)
class Verdict:
    check: Check
    result: str | None
    baseline: str | None

    @property
    def failed(self) -> bool:
        return self.check in (Check.DIFFERS, Check.MISSING)


def compare(result: str | None, baseline: str | None) -> Verdict:
    if baseline is None:
        return Verdict(Check.UNCHECKED, result, baseline)
    if result is None:
        return Verdict(Check.MISSING, result, baseline)
    return Verdict(Check.MATCH if result == baseline else Check.DIFFERS, result, baseline)
