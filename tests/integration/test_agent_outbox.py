"""The agent's outbox over a real pipe: it never blocks, control messages overtake output (a
task's exit only its own), stale heartbeats and progress are replaced, routine ones wait a little
for company, and output beyond the bound is dropped, counted and noticed."""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import time
from collections.abc import Iterator

import pytest

from worker.agent.outbox import OUTPUT_LIMIT_BYTES, ROUTINE_HOLD_S, WRITE_CHUNK_BYTES, Outbox
from worker.wire.protocol import Exited, Heartbeat, Message, Output, Progress, Started, decode_event

pytestmark = pytest.mark.timeout(30)

SLOW_READER_NOTICE = re.compile(r"^\[tfcluster\] dropped (\d+) lines \(\d+ bytes\) of stdout: "
                                r"the coordinator read more slowly")


@pytest.fixture
def pipe() -> Iterator[tuple[int, int]]:
    read_end, write_end = os.pipe()
    os.set_blocking(read_end, False)
    yield read_end, write_end
    for fd in (read_end, write_end):
        with contextlib.suppress(OSError):
            os.close(fd)


def drain(outbox: Outbox, read_end: int) -> list[Message]:
    """Write (nothing held back) and read until the outbox is empty; every message that came
    through."""
    data = bytearray()
    while True:
        outbox.write(hold=False)
        try:
            data += os.read(read_end, 1 << 20)
        except BlockingIOError:
            if not outbox.pending():
                break
    return [decode_event(bytes(line)) for line in data.splitlines()]


def test_control_goes_first_and_an_exit_takes_only_its_own_output_along(
        pipe: tuple[int, int]) -> None:
    read_end, write_end = pipe
    outbox = Outbox(write_end)
    for message in (Output(task="a", stream="stdout", line="a1"),
                    Output(task="b", stream="stdout", line="b1"),
                    Output(task="a", stream="stderr", line="a2"),
                    Heartbeat(ts=1.0),
                    Exited(task="a", ts=2.0, exit_code=3)):
        outbox.put(message)
    assert drain(outbox, read_end) == [
        Heartbeat(ts=1.0),
        Output(task="a", stream="stdout", line="a1"),
        Output(task="a", stream="stderr", line="a2"),
        Exited(task="a", ts=2.0, exit_code=3),
        Output(task="b", stream="stdout", line="b1"),
    ]


def test_while_the_pipe_is_backed_up_heartbeats_and_progress_are_replaced_by_newer_ones(
        pipe: tuple[int, int]) -> None:
    read_end, write_end = pipe
    outbox = Outbox(write_end)
    big = Output(task="a", stream="stdout", line="x" * 4 * fcntl.fcntl(write_end, fcntl.F_GETPIPE_SZ))
    outbox.put(big)
    outbox.write()  # nobody reads yet: the pipe is full, the rest of the line waits
    for message in (Heartbeat(ts=1.0), Progress(task="a", step=1, ts=1.0),
                    Progress(task="b", step=1, ts=1.0), Progress(task="a", step=2, ts=2.0),
                    Heartbeat(ts=2.0), Progress(task="a", step=3, ts=3.0)):
        outbox.put(message)
    # a task's first step is kept (it tells where the task began), later ones are replaced,
    # and the newer one counts what it replaced
    assert [m for m in drain(outbox, read_end) if m != big] == [
        Progress(task="a", step=1, ts=1.0), Progress(task="b", step=1, ts=1.0),
        Heartbeat(ts=2.0), Progress(task="a", step=3, ts=3.0, replaced_reports=1)]
    outbox.new_attempt()  # the next attempt's tasks begin again
    for step in (7, 8):
        outbox.put(Progress(task="a", step=step, ts=4.0))
    assert drain(outbox, read_end) == [Progress(task="a", step=7, ts=4.0),
                                       Progress(task="a", step=8, ts=4.0)]


def test_without_a_backlog_every_report_goes_with_its_metrics(pipe: tuple[int, int]) -> None:
    read_end, write_end = pipe
    outbox = Outbox(write_end)
    reports = [Progress(task="a", step=step, ts=1.0, metrics={"loss": 1.0 / step})
               for step in (1, 2, 3)]
    for message in (*reports, Heartbeat(ts=1.0), Heartbeat(ts=2.0)):
        outbox.put(message)  # all within the hold: they go out together
    assert drain(outbox, read_end) == [*reports, Heartbeat(ts=2.0)]


def test_output_nobody_reads_is_bounded_and_what_is_dropped_is_told(
        pipe: tuple[int, int]) -> None:
    read_end, write_end = pipe
    outbox = Outbox(write_end)
    line = "x" * 1000
    count = 3 * OUTPUT_LIMIT_BYTES // len(line)
    for _ in range(count):  # nobody reads meanwhile: this must neither block nor grow unbounded
        outbox.put(Output(task="a", stream="stdout", line=line))
        outbox.write()
    outbox.put(Heartbeat(ts=1.0))
    received = drain(outbox, read_end)
    # behind only what the pipe held and the one write under way, ahead of all queued output
    ahead = fcntl.fcntl(write_end, fcntl.F_GETPIPE_SZ) + WRITE_CHUNK_BYTES
    assert received.index(Heartbeat(ts=1.0)) <= ahead // len(line) + 2
    lines = [m.line for m in received if isinstance(m, Output)]
    notices = [int(match.group(1)) for text in lines if (match := SLOW_READER_NOTICE.match(text))]
    assert notices
    assert lines.count(line) + sum(notices) == count
    assert lines.count(line) * len(line) < 1.5 * OUTPUT_LIMIT_BYTES


def test_a_reader_that_is_gone_breaks_nothing(pipe: tuple[int, int]) -> None:
    read_end, write_end = pipe
    outbox = Outbox(write_end)
    os.close(read_end)
    outbox.put(Started(task="a", pid=1, ts=1.0))
    outbox.write()
    assert outbox.broken and not outbox.pending()
    outbox.put(Exited(task="a", ts=1.0, exit_code=0))
    assert not outbox.pending()


class Clock:
    """``time.monotonic`` (which :mod:`worker.agent.outbox` reads), moved by the test."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    fake = Clock()
    monkeypatch.setattr(time, "monotonic", fake)  # worker.agent.outbox reads it as time.monotonic()
    return fake


def read_all(read_end: int) -> list[Message]:
    try:
        data = os.read(read_end, 1 << 20)
    except BlockingIOError:
        return []
    return [decode_event(line) for line in data.splitlines()]


def test_routine_messages_wait_up_to_the_hold_then_go_together(
        pipe: tuple[int, int], clock: Clock) -> None:
    read_end, write_end = pipe
    outbox = Outbox(write_end)
    outbox.put(Progress(task="a", step=1, ts=1.0))  # a task's first step: at once
    outbox.write()
    assert read_all(read_end) == [Progress(task="a", step=1, ts=1.0)]
    outbox.put(Progress(task="a", step=2, ts=2.0))
    clock.now += ROUTINE_HOLD_S / 2
    outbox.put(Heartbeat(ts=2.5))
    outbox.write()
    assert read_all(read_end) == [] and not outbox.pending()  # the agent need not watch the fd
    assert outbox.due_at() == pytest.approx(1000.0 + ROUTINE_HOLD_S)  # ...but wakes then
    clock.now = 1000.0 + ROUTINE_HOLD_S
    assert outbox.pending()
    outbox.write()
    assert read_all(read_end) == [Progress(task="a", step=2, ts=2.0), Heartbeat(ts=2.5)]
    assert outbox.due_at() is None


def test_any_other_message_takes_the_held_ones_along_in_order(
        pipe: tuple[int, int], clock: Clock) -> None:
    read_end, write_end = pipe
    outbox = Outbox(write_end)
    outbox.put(Progress(task="a", step=1, ts=1.0))
    outbox.write()
    read_all(read_end)
    outbox.put(Progress(task="a", step=5, ts=2.0))
    outbox.write()
    outbox.put(Exited(task="a", ts=2.1, exit_code=1))
    outbox.write()
    assert read_all(read_end) == [Progress(task="a", step=5, ts=2.0),
                                  Exited(task="a", ts=2.1, exit_code=1)]


def test_the_final_flush_holds_nothing_back(pipe: tuple[int, int], clock: Clock) -> None:
    read_end, write_end = pipe
    outbox = Outbox(write_end)
    outbox.put(Heartbeat(ts=1.0))
    assert outbox.flush(timeout_s=5.0)
    assert read_all(read_end) == [Heartbeat(ts=1.0)]
