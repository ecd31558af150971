"""A calm console on failure: once tfcluster knows a task failed, the others are its to stop, and
what they print while they go (aborted collectives, tracebacks of the peer they lost, stack
dumps) goes to their log files only. The console then says one line per survivor: how it ended
and where its log is.

:class:`CalmStop` listens to the job's events (the records of ``events.jsonl``). The first
``task_failed`` of an attempt that is not a preemption mutes task output, withdrawing what the
other tasks printed in the moment before it was known (:meth:`.HeldLines.mute`); ``task_exited``
records with ``stopped`` say how each survivor ended; :meth:`CalmStop.survivor_lines`, asked once
the attempt's failure report is out, gives the lines and shows task output again. A preemption is
not muted: the tasks save and exit by themselves, and what they say about it is worth seeing.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from launcher.output.held import HeldLines
from launcher.run.events import EventType

#: A failure of this kind asks for a restart; the tasks' own words about saving stay visible.
_NOT_MUTED_KINDS = frozenset({"preempted"})


@dataclass(frozen=True)
class _Ending:
    exit_code: int | None
    signal: str | None

    def said(self) -> str:
        if self.signal == "SIGTERM":
            return "stopped by tfcluster (SIGTERM)"
        if self.signal == "SIGKILL":
            return "killed by tfcluster (SIGKILL: it outlived SIGTERM's grace period)"
        if self.signal:
            return f"ended by {self.signal} while tfcluster stopped it"
        return f"exited with code {self.exit_code} while tfcluster stopped it"


class CalmStop:
    def __init__(self, held: HeldLines, *, mute: bool = True) -> None:
        self._held = held
        self._mute = mute  # False: --verbose, every line is shown
        self._logs: dict[str, str] = {}
        self._failed: set[str] = set()
        self._endings: dict[str, _Ending] = {}

    def on_event(self, record: dict[str, Any]) -> None:
        """An event listener (:class:`~launcher.run.event_log.EventLog` records)."""
        kind = record.get("event")
        if kind == EventType.ATTEMPT_STARTED.value:
            self._held.unmute()
            self._logs.clear()
            self._failed.clear()
            self._endings.clear()
        elif kind == EventType.TASK_STARTED.value:
            self._logs[str(record.get("task"))] = str(record.get("log", ""))
        elif kind == EventType.TASK_FAILED.value:
            self._failed.add(str(record.get("task")))
            if self._mute and record.get("kind") not in _NOT_MUTED_KINDS:
                self._held.mute(str(record.get("task")))
        elif kind == EventType.TASK_EXITED.value and record.get("stopped"):
            self._endings[str(record.get("task"))] = _Ending(record.get("exit_code"),
                                                             record.get("signal"))

    def survivor_lines(self) -> list[str]:
        """One line per task that tfcluster stopped after the failure (none if nothing was
        muted); task output is shown again from now on."""
        muted = self._held.muted
        unshown = self._held.unmute()
        if not muted:
            return []
        lines = []
        for task in sorted(set(self._endings) | (set(unshown) - self._failed)):
            ending = self._endings.get(task)
            how = ending.said() if ending is not None else "stopped by tfcluster"
            count = unshown.get(task, 0)
            where = self._logs.get(task) or "its log in the run directory"
            said = f"; {count} more line(s) in {where}" if count else f"; log: {where}"
            lines.append(f"{task} {how}{said}")
        return lines

