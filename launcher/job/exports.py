"""Models the chief exported (``worker.save_model``, ``worker.saving.model_checkpoint``): the
``model_exported`` event made from a task's ``exported`` report, and what ``summary.json`` says of
them (``exports``, every one in order, and ``export``, the last: the job's final model), read
back from the run's ``events.jsonl`` so that a resumed run (``run --resume``) keeps them too."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, ClassVar

from launcher.output.events import EventType, read_events
from launcher.output.rundir import EVENTS_FILE


@dataclass(frozen=True)
class ModelExported:
    TYPE: ClassVar[EventType] = EventType.MODEL_EXPORTED
    attempt: int
    task: str
    path: str
    format: str

    @classmethod
    def from_report(cls, attempt: int, task: str, data: Mapping[str, Any]) -> ModelExported:
        return cls(attempt, task=task, path=str(data.get("path", "")),
                   format=str(data.get("format", "")))

    def record(self) -> dict[str, Any]:
        return asdict(self)


def export_summary(run_dir: str) -> dict[str, Any]:
    """``exports`` (every ``model_exported`` event of the run, in order) and ``export`` (the
    last: the job's final model) for ``summary.json``, from the run's ``events.jsonl``."""
    path = Path(run_dir) / EVENTS_FILE
    try:
        events = read_events(path)
    except (OSError, ValueError):  # no events yet (or a torn last line): nothing exported
        events = []
    records = [{k: v for k, v in e.items() if k not in ("ts", "event")}
               for e in events if e.get("event") == EventType.MODEL_EXPORTED.value]
    return {"exports": records, "export": records[-1] if records else None}
