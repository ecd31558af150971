"""StreamWriter: writing to a pipe nobody reads never blocks, drops task output (counted) once
its queue is full, and stops at once, without an error, when the reader is gone."""

from __future__ import annotations

import contextlib
import io
import os
import time
from collections.abc import Iterator

import pytest

from launcher.output.terminal import StreamWriter


@pytest.fixture
def pipe() -> Iterator[tuple[int, io.TextIOWrapper]]:
    read_end, write_end = os.pipe()
    stream = open(write_end, "w")  # noqa: SIM115 - closed below
    yield read_end, stream
    with contextlib.suppress(OSError):  # the reader may have "gone away" already
        stream.close()
    with contextlib.suppress(OSError):
        os.close(read_end)


def read_all(fd: int) -> bytes:
    os.set_blocking(fd, False)
    chunks = []
    while True:
        try:
            chunk = os.read(fd, 1 << 16)
        except BlockingIOError:
            return b"".join(chunks)
        if not chunk:
            return b"".join(chunks)
        chunks.append(chunk)


def end_reader(writer: StreamWriter, read_end: int) -> None:
    """Close the read end and wait for the writer's thread to see EPIPE and stop, so that it
    cannot write into a pipe a later test gets the same descriptor numbers for."""
    os.close(read_end)
    writer.close(timeout_s=10)  # a blocked write fails at once; an idle thread just ends
    assert writer.flush(0.0)


def test_a_stalled_reader_never_blocks_the_writer(pipe: tuple[int, io.TextIOWrapper]) -> None:
    read_end, stream = pipe
    writer = StreamWriter(stream, max_bytes=256 * 1024)
    line = "x" * 1023 + "\n"
    started = time.monotonic()
    for _ in range(10_000):  # 10 MB into a 64 KB pipe nobody reads
        writer.write(line, droppable=True)
    assert time.monotonic() - started < 2.0
    assert writer.dropped > 9_000
    assert not writer.broken
    end_reader(writer, read_end)


def test_own_messages_have_room_beyond_task_output(pipe: tuple[int, io.TextIOWrapper]) -> None:
    read_end, stream = pipe
    writer = StreamWriter(stream, max_bytes=128 * 1024, max_priority_bytes=64 * 1024)
    for _ in range(1_000):
        writer.write("t" * 1023 + "\n", droppable=True)
    writer.write("tfcluster: the root cause\n")
    received = b""
    deadline = time.monotonic() + 10
    while b"the root cause" not in received and time.monotonic() < deadline:
        received += os.read(read_end, 1 << 16)
    assert b"the root cause" in received
    end_reader(writer, read_end)


def test_everything_arrives_in_order_when_the_reader_keeps_up(
        pipe: tuple[int, io.TextIOWrapper]) -> None:
    read_end, stream = pipe
    writer = StreamWriter(stream)
    for n in range(100):
        writer.write(f"{n}\n", droppable=n % 2 == 0)
    assert writer.flush(5.0)
    assert read_all(read_end).decode().split() == [str(n) for n in range(100)]
    assert writer.dropped == 0


def test_a_reader_that_went_away_stops_the_echo_quietly(
        pipe: tuple[int, io.TextIOWrapper]) -> None:
    read_end, stream = pipe
    writer = StreamWriter(stream)
    os.close(read_end)
    writer.write("first\n")
    deadline = time.monotonic() + 5
    while not writer.broken and time.monotonic() < deadline:
        writer.flush(0.1)
    assert writer.broken
    writer.write("after\n")  # dropped, no error
    writer.close()


def test_a_stream_without_a_descriptor_is_written_at_once() -> None:
    out = io.StringIO()
    writer = StreamWriter(out)
    writer.write("now\n", droppable=True)
    assert out.getvalue() == "now\n"
