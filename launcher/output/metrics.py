"""The metrics tasks report (``worker.report(step, **metrics)``), kept in the run directory.

Every report becomes one line of ``RUN_DIR/metrics.jsonl`` (``ts``, ``attempt``, ``task``,
``step``, ``metrics``) and points in the task's TensorBoard run (:mod:`launcher.output.tensorboard`);
job-level figures (steps/s) go to the ``job`` run. Both are written by one thread of their own
behind a bounded queue, woken a few times a second to write what queued up, so the job loop only
ever appends to a queue and never waits for a disk:

- a full queue drops the report (counted);
- once ``max_bytes`` of ``metrics.jsonl`` are written, further reports are dropped (counted), for
  TensorBoard too: a long job cannot fill the disk with its metrics;
- a write that fails (disk full) is said once, and from then on reports are dropped (counted);
- a report whose step TensorBoard cannot store (not a whole number from 0 to 2**63-1), or that
  cannot be written for what it holds, is dropped (counted, the reason kept, said once): one bad
  value never stops the writer, and the reports after it are kept;
- metrics a task left out of a report too wide to send (``worker.report`` keeps the step) are
  counted as ``metrics_over_size`` (metric values, where the other counts are reports);
- reports an agent replaced by a newer one of the same task while tfcluster read slowly are
  counted as ``replaced`` (the newer report says how many).

What was kept and dropped, and why, is in ``summary.json`` (:meth:`MetricsSink.close`).
"""

from __future__ import annotations

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
from launcher.run import json_text
from worker.wire.reports import MAX_PROGRESS_LINE_BYTES, MAX_STEP
from worker.wire.safe_open import open_appending

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
#: The summary keeps the reasons of this many drops (the first ones; the counts are all of them).
MAX_REASONS = 10
#: What a report may hold that the writer cannot write, dropped as a bad value.
_BAD_VALUE_ERRORS = (ValueError, TypeError, OverflowError, RecursionError)


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
    #: Metrics the task left out of the report to keep it within its bound.
    dropped_metrics: int = 0
    #: Earlier reports of the task this one replaced on its way (their metrics are lost).
    replaced_reports: int = 0


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
        self.dropped_bad_value = 0  # by the job loop, as reports arrive
        self.dropped_unwritable = 0  # by the writer thread
        self.dropped_metrics = 0
        self.dropped_replaced = 0
        self._reasons: list[str] = []
        self._told_over_size: set[str] = set()
        self._told_bad = False
        self.bytes = 0
        self._file: IO[str] | None = None
        self._board = TensorBoardWriter(self.tensorboard_dir)
        self._broken = False

    # --- the job loop's side: never blocks --------------------------------------------------

    def report(self, report: Report) -> None:
        problem = _bad_value(report)
        if problem is not None:
            self.dropped_bad_value += 1
            self._dropped(f"a report of {report.task} (attempt {report.attempt}): {problem}")
            return
        if report.replaced_reports:
            if not self.dropped_replaced:
                self._reason(f"{report.task}'s agent replaced {report.replaced_reports} of its "
                             f"reports (before step {report.step}) by newer ones while tfcluster "
                             "read more slowly than the tasks reported")
            self.dropped_replaced += report.replaced_reports
        if report.dropped_metrics:
            self.dropped_metrics += report.dropped_metrics
            if report.task not in self._told_over_size:
                self._told_over_size.add(report.task)
                self._reason(f"{report.task} left {report.dropped_metrics} metrics out of its "
                             f"report of step {report.step}: it was wider than "
                             f"{MAX_PROGRESS_LINE_BYTES} bytes (and maybe of later ones)")
        self._put(report)

    def _dropped(self, reason: str) -> None:
        """A report was dropped for what it holds: keep the reason, say the first one."""
        self._reason(reason)
        if not self._told_bad and self._warn is not None:
            self._told_bad = True
            self._warn(f"metrics: dropped {reason}; such reports are counted in summary.json "
                       "(metrics.dropped.bad_value)")

    def _reason(self, text: str) -> None:
        if len(self._reasons) < MAX_REASONS:
            self._reasons.append(text)

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
                            "write_error": self.dropped_write_error,
                            "bad_value": self.dropped_bad_value + self.dropped_unwritable,
                            "metrics_over_size": self.dropped_metrics,
                            "replaced": self.dropped_replaced},
                "dropped_why": list(self._reasons),
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
                    self._write_or_drop(self._pending.popleft())
                if stopping:
                    return
                if time.monotonic() >= next_flush:
                    self._flush()
                    next_flush = time.monotonic() + FLUSH_INTERVAL_S
        finally:
            self._flush()
            self._close_files()

    def _write_or_drop(self, item: Report | JobFigures) -> None:
        """Write ``item``; one that cannot be written for what it holds is dropped, counted."""
        try:
            self._write(item)
        except _BAD_VALUE_ERRORS as exc:
            what = "the job's figures" if isinstance(item, JobFigures) else \
                f"a report of {item.task} (attempt {item.attempt}, step {item.step})"
            self.dropped_unwritable += isinstance(item, Report)
            self._dropped(f"{what}: it cannot be written ({type(exc).__name__}: "
                          f"{str(exc)[:200]})")

    def _write(self, item: Report | JobFigures) -> None:
        if isinstance(item, JobFigures):
            if item.values and not self._broken:
                self._guard(lambda: self._board.scalars(JOB_RUN, item.step, item.values, item.ts))
            return
        line = json_text.dumps({"ts": item.ts, "attempt": item.attempt, "task": item.task,
                                "step": item.step, "metrics": dict(item.metrics)},
                               separators=(",", ":"), default=str) + "\n"  # NaN: null
        if self._broken:
            self.dropped_write_error += 1
            return
        if self.bytes + len(line) > self.max_bytes:
            self.dropped_size_cap += 1
            return
        self._guard(lambda: self._write_report(item, line))

    def _write_report(self, item: Report, line: str) -> None:
        if self._file is None:
            self._file = open_appending(self.path)  # never through a planted symlink
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


def _bad_value(report: Report) -> str | None:
    """Why ``report`` cannot be kept (its step is not one TensorBoard can store, its metrics are
    not an object), or None."""
    step = report.step
    if not isinstance(step, int) or isinstance(step, bool) or not 0 <= step <= MAX_STEP:
        shown = repr(step) if len(repr(step)) <= 40 else repr(step)[:37] + "..."
        return f"its step {shown} is not a whole number from 0 to 2**63-1"
    if not isinstance(report.metrics, Mapping):
        return f"its metrics are a {type(report.metrics).__name__}, not an object"
    return None
