"""``worker.report``'s progress reports, batched so that a training step pays next to nothing.

The training thread only puts the step and the metrics as given (tensors and numpy values
unconverted) into :class:`ReportQueue`; a daemon thread, started on the first report, takes what
is pending, converts and writes it, then waits :data:`FLUSH_INTERVAL_S` before its next write.
Reports made meanwhile wait for that write, and there a newer report replaces an older unsent one
that carries the same metric names (progress is cumulative: only the latest step matters). So the
agent's pipe gets at most one write per :data:`FLUSH_INTERVAL_S`, every report is written at most
about that long after it is made, and ``metrics.jsonl`` / TensorBoard get a point of each kind of
report per write (an evaluation's metrics, reported every few hundred steps under other names, are
never replaced by the training loss of the next step). The process's first report is never
replaced: it tells the coordinator where the task began (tasks of one job that begin at different
steps restored different checkpoints), so a second report made before the first is written must
not stand in for it.

:meth:`ReportQueue.flush` writes what is pending at once, in the caller's thread: every other kind
of report flushes first (so the agent sees a step before the ``preempted`` or the traceback that
follows it), and so do the interpreter's exit (``atexit``) and the helpers that save a checkpoint
before exiting. A forked child starts with an empty queue and no thread (it must not write its
parent's reports).
"""

from __future__ import annotations

import atexit
import contextlib
import os
import threading
import time
from collections.abc import Callable
from typing import Any

#: The sender writes at most once per this many seconds (reports made meanwhile are batched).
#: Each write wakes the agent, and through it the coordinator, on cores the training needs: in
#: a lock-step job every such wake delays every task's step. Written 20 times a second, the
#: reports cost the digits example about 7% of its steps/s on 2 cores (benchmarks/throughput.py:
#: 0.93x the example without the helpers, the median of 7 rounds; 4 times a second, 1.04x over 4
#: rounds, within the noise). A person, the hang check (seconds), the step rates (5 s windows)
#: and TensorBoard's curves need no more.
FLUSH_INTERVAL_S = 0.25
#: Reports with this many different sets of metric names may wait at once; a newer set beyond
#: them replaces them all (a script that invents new metric names every step).
MAX_PENDING = 64

#: One pending report: its step and its metrics as given to ``worker.report``.
Pending = tuple[int, dict[str, Any]]
#: The first report's key in the pending reports: no other report has it, so none replaces it.
_FIRST: tuple[str, ...] = ("\0first report",)


class ReportQueue:
    """Progress reports waiting for the sender thread, written by ``write`` (one call per batch,
    oldest first; called under this queue's write lock, so batches keep their order)."""

    def __init__(self, write: Callable[[list[Pending]], None]) -> None:
        self._write = write
        self._reset()
        os.register_at_fork(after_in_child=self._reset)
        atexit.register(self.flush)

    def _reset(self) -> None:
        self._pending: dict[tuple[str, ...], Pending] = {}
        self._lock = threading.Lock()  # guards _pending
        self._write_lock = threading.Lock()  # one batch written at a time, in order
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        self._first = True  # no report queued yet (in this process)

    def put(self, step: int, metrics: dict[str, Any]) -> None:
        """Queue one report (the training thread's whole cost of a report)."""
        with self._lock:
            key, self._first = (_FIRST if self._first else tuple(metrics)), False
            pending = self._pending
            if pending.pop(key, None) is None and len(pending) >= MAX_PENDING:
                first = pending.get(_FIRST)
                pending.clear()
                if first is not None:
                    pending[_FIRST] = first
            pending[key] = (step, metrics)  # at the end: the batch keeps the calls' order
        if self._thread is None:
            self._start()
        if not self._wake.is_set():
            self._wake.set()

    def flush(self) -> None:
        """Write every pending report now, in this thread (waits for a write under way)."""
        with self._write_lock:
            with self._lock:
                batch, self._pending = self._pending, {}
            if batch:
                self._write(list(batch.values()))

    def _start(self) -> None:
        with self._lock:
            if self._thread is not None:
                return
            self._thread = threading.Thread(target=self._send, name="tfcluster-report",
                                            daemon=True)
        self._thread.start()

    def _send(self) -> None:
        wake = self._wake
        while True:
            wake.wait()
            wake.clear()
            began = time.monotonic()
            with contextlib.suppress(Exception):  # nothing here may reach the training loop
                self.flush()
            rest = FLUSH_INTERVAL_S - (time.monotonic() - began)
            if rest > 0:
                time.sleep(rest)
