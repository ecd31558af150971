"""TensorBoard event files under ``RUN_DIR/tensorboard/``, written without TensorFlow.

One directory (a TensorBoard *run*) per task, named like its log (``worker-1``), plus ``job`` for
the job's own figures; a tag per metric. The files are written with tensorboardX's ``EventsWriter``
(protobufs and the record format, no TensorFlow, no thread of its own), imported when the first
value is written so that ``tfcluster`` starts as fast without it.

A restarted job is one continuous curve: a task keeps its run and tags across attempts and its
points are placed at the steps it reports. When a task's first report of a later attempt is step
S, a ``SessionLog.START`` at S is written first: TensorBoard then drops the points of the earlier
attempt from S on (the steps it ran past its last checkpoint, which the new attempt redoes), as it
does for a TensorFlow job that restarts. Not thread-safe: one thread (the metrics writer) uses it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from worker.wire.tfconfig import TaskId, TFConfigError

TENSORBOARD_DIR = "tensorboard"
#: The run that holds job-level figures (steps/s).
JOB_RUN = "job"


def run_name(task: str) -> str:
    """``worker:1`` -> ``worker-1`` (as the task's log file is named)."""
    try:
        return TaskId.parse(task).file_stem
    except TFConfigError:
        return "".join(c if c.isalnum() or c in "-_." else "-" for c in task) or "task"


def scalar_values(metrics: Mapping[str, Any]) -> dict[str, float]:
    """The metrics TensorBoard can plot: finite numbers (booleans count as 0/1)."""
    found = {}
    for name, value in metrics.items():
        if isinstance(value, int | float) and math.isfinite(float(value)):
            found[str(name)] = float(value)
    return found


class TensorBoardWriter:
    def __init__(self, root: Path) -> None:
        self.root = root
        self._writers: dict[str, Any] = {}
        self.points = 0
        self.disabled = False  # tensorboardX is missing: metrics.jsonl only

    def preload(self) -> str | None:
        """Import tensorboardX now (about 0.15 s of CPU, once) rather than at the first point;
        what is wrong if it cannot be (then nothing is written)."""
        try:
            import tensorboardX.event_file_writer  # type: ignore[import-untyped]
            import tensorboardX.proto.event_pb2  # type: ignore[import-untyped]
            import tensorboardX.proto.summary_pb2  # type: ignore[import-untyped]  # noqa: F401
        except ImportError as exc:
            self.disabled = True
            return f"no TensorBoard files ({exc}; pip install tensorboardX)"
        return None

    def _writer(self, run: str) -> Any:
        writer = self._writers.get(run)
        if writer is None:
            from tensorboardX.event_file_writer import EventsWriter

            directory = self.root / run
            directory.mkdir(parents=True, exist_ok=True)
            writer = self._writers[run] = EventsWriter(str(directory / "events"))
        return writer

    def scalars(self, run: str, step: int, values: Mapping[str, float], wall_time: float) -> None:
        if not values or self.disabled:
            return
        from tensorboardX.proto.event_pb2 import Event
        from tensorboardX.proto.summary_pb2 import Summary

        summary = Summary(value=[Summary.Value(tag=tag, simple_value=value)
                                 for tag, value in values.items()])
        self._writer(run).write_event(Event(wall_time=wall_time, step=step, summary=summary))
        self.points += len(values)

    def restart(self, run: str, step: int, wall_time: float) -> None:
        """The run starts again at ``step``: TensorBoard forgets its points from ``step`` on."""
        if self.disabled:
            return
        from tensorboardX.proto.event_pb2 import Event, SessionLog

        self._writer(run).write_event(Event(wall_time=wall_time, step=step,
                                            session_log=SessionLog(status=SessionLog.START)))

    def flush(self) -> None:
        for writer in self._writers.values():
            writer.flush()

    def close(self) -> None:
        """Flush and close every file; safe to call more than once."""
        writers, self._writers = self._writers, {}
        for writer in writers.values():
            writer.close()
