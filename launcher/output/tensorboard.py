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

The run directory is a shared place (every task can write it): an event file is created afresh
(``O_EXCL``, :func:`worker.wire.safe_open.create_new`) in a directory opened without following a
symlink, never through a name planted at it (tensorboardX's own ``EventsWriter`` opens its
predictable name with ``open(path, "wb")``, which would truncate whatever file it points to).
"""

from __future__ import annotations

import math
import os
import socket
import struct
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any, BinaryIO

from worker.wire.safe_open import create_new, make_dirs
from worker.wire.tfconfig import TaskId, TFConfigError

TENSORBOARD_DIR = "tensorboard"
#: The run that holds job-level figures (steps/s).
JOB_RUN = "job"
#: How many names an event file tries when one is taken (two writers in the same second).
_NAME_TRIES = 100


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
        if not isinstance(value, int | float):
            continue
        try:
            number = float(value)
        except OverflowError:  # an int too large for a float: kept in metrics.jsonl only
            continue
        if math.isfinite(number):
            found[str(name)] = number
    return found


class EventFile:
    """One TensorBoard event file (TFRecord framing of ``Event`` protobufs), created afresh in
    ``directory``; the methods of tensorboardX's ``EventsWriter`` that :class:`TensorBoardWriter`
    uses."""

    def __init__(self, directory: str) -> None:
        from tensorboardX.proto.event_pb2 import Event  # type: ignore[import-untyped]

        stem = f"events.out.tfevents.{int(time.time())}.{socket.gethostname()}"
        self._file = self._create(directory, stem)
        self.write_event(Event(wall_time=time.time(), file_version="brain.Event:2"))

    @staticmethod
    def _create(directory: str, stem: str) -> BinaryIO:
        for attempt in range(_NAME_TRIES):
            name = stem if attempt == 0 else f"{stem}.{attempt}"
            try:
                return create_new(os.path.join(directory, name))
            except FileExistsError:
                continue
        raise FileExistsError(f"{directory}: {_NAME_TRIES} event files named {stem}* exist")

    def write_event(self, event: Any) -> None:
        from tensorboardX.record_writer import masked_crc32c  # type: ignore[import-untyped]

        data = event.SerializeToString()
        header = struct.pack("Q", len(data))
        self._file.write(header + struct.pack("I", masked_crc32c(header)) + data
                         + struct.pack("I", masked_crc32c(data)))

    def flush(self) -> None:
        self._file.flush()
        os.fsync(self._file.fileno())

    def close(self) -> None:
        self.flush()
        self._file.close()


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
            self.root.parent.mkdir(parents=True, exist_ok=True)
            directory = make_dirs(self.root.parent, self.root.name, run)
            writer = self._writers[run] = EventFile(directory)
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
