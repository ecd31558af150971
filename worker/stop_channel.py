"""The task's end of the agent's control pipe (:mod:`worker.wire.control`): the step after which
the whole job stops on a preemption notice, as the coordinator chose it.

A thread reads the pipe and, for each stop step it learns, answers ``stop_ack`` on the report pipe
(the coordinator holds the task that got the notice until every other task has answered, see
:mod:`launcher.job.stop_step`). The training loop only reads :attr:`StopChannel.step`, a plain
attribute: no system call and no TensorFlow op per step. A task that got the notice itself tells
the coordinator with :meth:`StopChannel.notice` and waits for the step with :meth:`StopChannel.wait`.

There is one channel per process (:func:`stop_channel`), None outside tfcluster (no
``TFCLUSTER_CONTROL_FD``) and in a forked child, which must not read its parent's pipe.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading

from worker.reporting import send as report_send
from worker.wire.control import MAX_CONTROL_LINE_BYTES, BadControlLine, parse_stop_at
from worker.wire.env import CONTROL_FD
from worker.wire.reports import ReportKind

__all__ = ["StopChannel", "stop_channel"]


class StopChannel:
    """Reads stop steps from ``fd`` in a daemon thread once :meth:`start` is called."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        #: The job's stop step, once the coordinator has sent it (the earliest, if several).
        self.step: int | None = None
        self._known = threading.Condition()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        """Start reading (idempotent)."""
        with self._known:
            if self._thread is not None:
                return
            self._thread = threading.Thread(target=self._read, name="tfcluster-stop-step",
                                            daemon=True)
        self._thread.start()

    def notice(self, step: int) -> None:
        """Tell the coordinator that this task got a preemption notice after finishing ``step``."""
        report_send({"kind": ReportKind.PREEMPTION_NOTICE.value, "step": step})

    def wait(self, timeout_s: float) -> int | None:
        """The stop step, waiting up to ``timeout_s`` for it (None if it has not come)."""
        with self._known:
            self._known.wait_for(lambda: self.step is not None, timeout_s)
            return self.step

    def _read(self) -> None:
        pending = b""
        while True:
            try:
                chunk = os.read(self.fd, 4096)
            except InterruptedError:
                continue
            except OSError:
                return  # closed by the script
            if not chunk:
                return  # the agent is gone
            *lines, pending = (pending + chunk).split(b"\n")
            for line in lines:
                self._take(line)
            if len(pending) > MAX_CONTROL_LINE_BYTES:
                pending = b""

    def _take(self, line: bytes) -> None:
        try:
            step = parse_stop_at(line)
        except BadControlLine as exc:
            print(f"[tfcluster] ignored a control line: {exc}", file=sys.stderr, flush=True)
            return
        with self._known:
            if self.step is None or step < self.step:
                self.step = step
            self._known.notify_all()
        report_send({"kind": ReportKind.STOP_ACK.value, "step": step})


_channel: dict[str, StopChannel | None] = {}


def stop_channel() -> StopChannel | None:
    """This process's channel (started), or None outside tfcluster."""
    if "it" not in _channel:
        raw = os.environ.get(CONTROL_FD, "")
        fd = int(raw) if raw.isascii() and raw.isdigit() else None
        if fd is not None:
            with contextlib.suppress(OSError):
                os.set_blocking(fd, True)
                os.set_inheritable(fd, False)  # the task's own children must not read it
                _channel["it"] = StopChannel(fd)
        _channel.setdefault("it", None)
    channel = _channel["it"]
    if channel is not None:
        channel.start()
    return channel


def _forgotten_in_child() -> None:
    _channel["it"] = None


os.register_at_fork(after_in_child=_forgotten_in_child)
