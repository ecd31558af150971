"""While the coordinator's end is backed up, the agent replaces a task's queued report by its
newer one (the current state, not a backlog): the newer one says how many it replaced, so that the
coordinator counts them as dropped instead of losing them without a word (issue 25, item 5)."""

from __future__ import annotations

import contextlib
import fcntl
import os

import pytest

from worker.agent.outbox import Outbox
from worker.wire.protocol import Progress, decode_event

pytestmark = pytest.mark.timeout(30)


def test_a_replaced_report_is_counted_by_the_one_that_replaced_it() -> None:
    read_fd, write_fd = os.pipe()
    try:
        fcntl.fcntl(write_fd, fcntl.F_SETPIPE_SZ, 4096)
        outbox = Outbox(write_fd)
        wide = {f"m{i}": float(i) for i in range(2000)}  # far more than the pipe holds
        outbox.put(Progress(task="worker:0", step=1, ts=1.0, metrics=wide))  # first: kept
        outbox.put(Progress(task="worker:0", step=2, ts=2.0, metrics=wide))
        outbox.write(hold=False)  # the pipe fills up: the coordinator's end is backed up
        for step in (3, 4, 5):  # each replaces the one queued before it
            outbox.put(Progress(task="worker:0", step=step, ts=float(step), metrics=wide))
        data = b""
        os.set_blocking(read_fd, False)
        while outbox.pending() or data.count(b"\n") < 3:
            outbox.write(hold=False)
            with contextlib.suppress(BlockingIOError):
                data += os.read(read_fd, 1 << 16)
        got = [decode_event(line) for line in data.splitlines()]
    finally:
        os.close(read_fd)
        os.close(write_fd)
    assert all(isinstance(m, Progress) for m in got)
    steps = [(m.step, m.replaced_reports) for m in got if isinstance(m, Progress)]
    assert steps == [(1, 0), (2, 0), (5, 2)]
