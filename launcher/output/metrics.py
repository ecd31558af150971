"""The metrics tasks report (``worker.report(step, **metrics)``), kept in the run directory.

Every report becomes one line of ``RUN_DIR/metrics.jsonl`` (``ts``, ``attempt``, ``task``,
``step``, ``metrics``) and points in the task's TensorBoard run (:mod:`launcher.output.tensorboard`);
job-level figures (steps/s) go to the ``job`` run. Both are written by one thread of their own
behind a bounded queue, woken a few times a second to write what queued up, so the job loop only
ever appends to a queue and never waits for a disk:

- a full queue drops the report (counted);
- once ``max_bytes`` of ``metrics.jsonl`` are written, further reports are dropped (counted), for
  TensorBoard too: a long job cannot fill the disk with its metrics;
- a write that fails (disk full) is said once, and from then on reports are dropped (counted).

What was kept and dropped is in ``summary.json`` (:meth:`MetricsSink.close`).
"""

from __future__ import annotations

import json
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from launcher.output.tensorboard import (
    JOB_RUN,
    TENSORBOARD_DIR,
    TensorBoardWriter,
    run_name,
    scalar_values,
)

METRICS_FILE = "metrics.jsonl"
#: ``metrics.jsonl`` stops growing here (TensorBoard's files stop with it).
DEFAULT_MAX_BYTES = 256 * 1024 * 1024
#: Reports waiting for the writer thread; more are dropped.
QUEUE_SIZE = 20_000
#: The files are flushed at least this often (TensorBoard shows the points after a flush).
FLUSH_INTERVAL_S = 2.0
#: The writer wakes this often and writes everything queued meanwhile (one wake-up, not one per
#: report: the coordinator's CPU stays with the job loop).
BATCH_INTERVAL_S = 0.25
#: How long :meth:`MetricsSink.close` waits for the writer to finish what is queued.
CLOSE_WAIT_S = 10.0


@dataclass(frozen=True)
class Report:
    """One ``worker.report`` of one task."""

    ts: float
    attempt: int
    task: str
    step: int
    metrics: Mapping[str, Any] = field(default_factory=dict)
    #: The task's first report of an attempt after the first: its curve restarts at ``step``.
    restart: bool = False


@dataclass(frozen=True)
class JobFigures:
    ts: float
    step: int
    values: Mapping[str, float]


_Item = Report | JobFigures


class MetricsSink:
    def __init__(self, run_dir: Path, *, max_bytes: int = DEFAULT_MAX_BYTES,
                 queue_size: int = QUEUE_SIZE, warn: Callable[[str], None] | None = None) -> None:
        self.path = run_dir / METRICS_FILE
        self.tensorboard_dir = run_dir / TENSORBOARD_DIR
        self.max_bytes = max_bytes
        self._warn = warn
        self.queue_size = queue_size
        #: appended by the job loop, emptied by the writer (deque operations are atomic)
        self._pending: deque[_Item] = deque()
        self._thread: threading.Thread | None = None
        self._start_lock = threading.Lock()
        self._closed = False
        self._stop = threading.Event()
        self.reports = 0  # lines written
        self.dropped_queue_full = 0
        self.dropped_size_cap = 0
        self.dropped_write_error = 0
        self.bytes = 0
        self._file: IO[str] | None = None
        self._board = TensorBoardWriter(self.tensorboard_dir)
        self._broken = False

    # --- the job loop's side: never blocks --------------------------------------------------

    def report(self, report: Report) -> None:
        self._put(report)

    def job(self, figures: JobFigures) -> None:
        self._put(figures)

    def _put(self, item: Report | JobFigures) -> None:
        if self._closed:
            return
        self._start()
        if len(self._pending) >= self.queue_size:
            if isinstance(item, Report):
                self.dropped_queue_full += 1
            return
        self._pending.append(item)

    def _start(self) -> None:
        if self._thread is None:
            with self._start_lock:
                if self._thread is None:
                    self._thread = threading.Thread(target=self._run, name="tfcluster-metrics",
                                                    daemon=True)
                    self._thread.start()

    def close(self, wait_s: float = CLOSE_WAIT_S) -> dict[str, Any]:
        """Write what is queued, close the files, and say what was kept; safe to call again."""
        if not self._closed:
            self._closed = True
            self._stop.set()
            if self._thread is not None:
                self._thread.join(wait_s)
        return self.summary()

    def summary(self) -> dict[str, Any]:
        written = self.reports > 0
        return {"file": str(self.path) if written else None,
                "tensorboard": str(self.tensorboard_dir) if self._board.points else None,
                "reports": self.reports, "bytes": self.bytes,
                "dropped": {"queue_full": self.dropped_queue_full,
                            "size_cap": self.dropped_size_cap,
                            "write_error": self.dropped_write_error},
                "max_bytes": self.max_bytes}

    # --- the writer thread ------------------------------------------------------------------

    def _run(self) -> None:
        """Wake every :data:`BATCH_INTERVAL_S` (not once per report) and write what queued up."""
        if (problem := self._board.preload()) is not None and self._warn is not None:
            self._warn(problem)
        next_flush = time.monotonic() + FLUSH_INTERVAL_S
        try:
            while True:
                stopping = self._stop.wait(BATCH_INTERVAL_S)
                while self._pending:
                    self._write(self._pending.popleft())
                if stopping:
                    return
                if time.monotonic() >= next_flush:
                    self._flush()
                    next_flush = time.monotonic() + FLUSH_INTERVAL_S
        finally:
            self._flush()
            self._close_files()

    def _write(self, item: Report | JobFigures) -> None:
        if isinstance(item, JobFigures):
            if item.values and not self._broken:
                self._guard(lambda: self._board.scalars(JOB_RUN, item.step, item.values, item.ts))
            return
        line = json.dumps({"ts": item.ts, "attempt": item.attempt, "task": item.task,
                           "step": item.step, "metrics": dict(item.metrics)},
                          separators=(",", ":"), default=str) + "\n"
        if self._broken:
            self.dropped_write_error += 1
            return
        if self.bytes + len(line) > self.max_bytes:
            self.dropped_size_cap += 1
            return
        self._guard(lambda: self._write_report(item, line))

    def _write_report(self, item: Report, line: str) -> None:
        if self._file is None:
            self._file = self.path.open("a", encoding="utf-8")
        self._file.write(line)
        self.bytes += len(line)
        self.reports += 1
        run = run_name(item.task)
        if item.restart:
            self._board.restart(run, item.step, item.ts)
        self._board.scalars(run, item.step, scalar_values(item.metrics), item.ts)

    def _guard(self, write: Callable[[], None]) -> None:
        try:
            write()
        except (OSError, ImportError) as exc:
            self._broken = True
            self.dropped_write_error += 1
            if self._warn is not None:
                self._warn(f"cannot write the metrics ({exc}); "
                           "further reports are dropped (the job goes on)")

    def _flush(self) -> None:
        if self._file is not None:
            self._guard(self._file.flush)
        self._guard(self._board.flush)

    def _close_files(self) -> None:
        if self._file is not None:
            self._guard(self._file.close)
            self._file = None
        self._guard(self._board.close)
