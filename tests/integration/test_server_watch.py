"""The port watch of a parameter_server job's servers (:mod:`launcher.job.server_watch`), on real
sockets: a server's first answer is reported once per start; a server that answered and then
stopped answering is reported once; one that never answered yet (still importing TensorFlow) is
not; a server that exited and was started again on the same port is never reported for its
earlier life."""

from __future__ import annotations

import queue
import socket
import time
from collections.abc import Callable, Iterator

import pytest

from launcher.job.server_watch import MISSES, ServerAnswered, ServerSilent, ServerWatch

pytestmark = pytest.mark.timeout(30)
INTERVAL_S = 0.05


@pytest.fixture
def reports() -> Iterator[tuple[ServerWatch, queue.Queue[ServerAnswered | ServerSilent]]]:
    put: queue.Queue[ServerAnswered | ServerSilent] = queue.Queue()
    watch = ServerWatch(put.put, time.monotonic, INTERVAL_S)
    try:
        yield watch, put
    finally:
        watch.close()


def listener() -> socket.socket:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(16)
    return sock


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def until(condition: Callable[[], bool], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(INTERVAL_S / 5)


def test_a_server_whose_port_stops_answering_is_reported_once(
        reports: tuple[ServerWatch, queue.Queue[ServerAnswered | ServerSilent]]) -> None:
    watch, put = reports
    server = listener()
    port = server.getsockname()[1]
    watch.watch("ps:0", "h", "127.0.0.1", port)
    answered = put.get(timeout=10)
    assert isinstance(answered, ServerAnswered) and answered.task == "ps:0"
    server.close()
    silent = put.get(timeout=10)
    assert isinstance(silent, ServerSilent) and (silent.task, silent.host) == ("ps:0", "h")
    assert f"its port {port} stopped answering ({MISSES} connects in a row failed" in silent.why
    with pytest.raises(queue.Empty):  # once
        put.get(timeout=INTERVAL_S * (MISSES + 2))


def test_a_server_that_never_answered_yet_is_not_reported(
        reports: tuple[ServerWatch, queue.Queue[ServerAnswered | ServerSilent]]) -> None:
    watch, put = reports
    watch.watch("ps:0", "h", "127.0.0.1", free_port())  # importing TensorFlow: nothing bound
    with pytest.raises(queue.Empty):
        put.get(timeout=INTERVAL_S * (MISSES + 4))
    assert "ps:0" in watch._watched  # still watched, for its first answer


def test_a_look_at_a_servers_earlier_life_never_reports_its_next_one(
        reports: tuple[ServerWatch, queue.Queue[ServerAnswered | ServerSilent]]) -> None:
    # The watch thread looks at a snapshot of the servers: while it looks at the killed ps's
    # entry, the ps is forgotten (it exited) and watched again (started again, same port). The
    # old entry's misses must not report, or unwatch, the new process.
    watch, put = reports
    port = free_port()
    watch.watch("ps:0", "h", "127.0.0.1", port)
    earlier = watch._watched["ps:0"]
    earlier.answered, earlier.misses = True, MISSES - 1  # it had stopped answering, then died
    watch.forget("ps:0")
    watch.watch("ps:0", "h", "127.0.0.1", port)
    later = watch._watched["ps:0"]
    watch._look("ps:0", earlier)  # the thread's look from its snapshot, after the restart
    assert watch._watched.get("ps:0") is later
    with pytest.raises(queue.Empty):
        put.get(timeout=INTERVAL_S * 4)


def test_a_servers_first_answer_is_reported_once_per_start(
        reports: tuple[ServerWatch, queue.Queue[ServerAnswered | ServerSilent]]) -> None:
    watch, put = reports
    port = free_port()
    watch.watch("ps:0", "h", "127.0.0.1", port)  # importing TensorFlow: nothing bound yet
    with pytest.raises(queue.Empty):
        put.get(timeout=INTERVAL_S * 4)
    before = time.monotonic()
    with socket.create_server(("127.0.0.1", port)):
        answered = put.get(timeout=10)
        assert isinstance(answered, ServerAnswered) and answered.task == "ps:0"
        assert answered.at >= before
        with pytest.raises(queue.Empty):  # once, though it keeps answering
            put.get(timeout=INTERVAL_S * 4)
        watch.forget("ps:0")  # it exited; started again on the same port
        watch.watch("ps:0", "h", "127.0.0.1", port)
        assert put.get(timeout=10).task == "ps:0"
