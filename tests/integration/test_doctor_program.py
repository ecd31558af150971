"""The doctor's program on one host, for real on this machine: its port for peers, the round trips
and streams it measures, the checkpoint dir's speed without a trace left, and its conversation."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support.jobs import REPO
from worker.doctor.peer import PeerServer, round_trips, stream
from worker.doctor.program import Program
from worker.doctor.storage import TEST_FILE_PREFIX, storage_speed
from worker.wire.version import TFCLUSTER_VERSION

pytestmark = pytest.mark.timeout(60)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_round_trips_and_a_stream_to_a_peer_leave_its_port_free_for_the_task() -> None:
    port = free_port()
    server = PeerServer("127.0.0.1", [port])
    try:
        assert (server.port, server.bound) == (port, "127.0.0.1")  # the task's own port
        samples = round_trips("127.0.0.1", port, count=50, budget_s=5.0)
        assert len(samples) == 50 and all(0 < s < 1000 for s in samples)
        sent, elapsed = stream("127.0.0.1", port, seconds=0.2)
        assert sent > 1_000_000 and 0.2 <= elapsed < 5.0
    finally:
        server.close()
    # every connection was ended by the measuring side: no TIME_WAIT holds the task's port, so
    # the task binds it at once, even without SO_REUSEADDR
    with socket.socket() as task:
        task.bind(("127.0.0.1", port))


def test_a_taken_task_port_is_replaced_by_one_the_kernel_picks() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        busy = int(taken.getsockname()[1])
        server = PeerServer("127.0.0.1", [busy])
        try:
            assert server.port not in (busy, 0)
        finally:
            server.close()


def test_a_peer_that_is_not_there_is_an_error_naming_it() -> None:
    with pytest.raises(OSError, match=r"cannot connect to 127\.0\.0\.1 port \d+"):
        round_trips("127.0.0.1", free_port(), count=1, budget_s=1.0)


def test_storage_is_measured_and_leaves_nothing_behind(tmp_path: Path) -> None:
    existing = tmp_path / "ckpt"
    existing.mkdir()
    speed = storage_speed(str(existing), 4 * 2**20, budget_s=5.0)
    assert speed.write_bytes == speed.read_bytes == 4 * 2**20
    assert speed.write_s > 0 and speed.read_s > 0 and speed.cache_dropped
    assert list(existing.iterdir()) == []
    missing = tmp_path / "new" / "deeper"
    storage_speed(str(missing), 2**20, budget_s=5.0)
    assert list(tmp_path.iterdir()) == [existing]  # what it created for the test went too


def test_storage_in_a_path_that_cannot_be_a_directory_is_answered_with_the_error(
        tmp_path: Path) -> None:
    (tmp_path / "file").write_text("x")
    answer = Program().answer(json.dumps({"id": 4, "op": "storage", "dir": str(tmp_path / "file"),
                                          "size_bytes": 1024, "budget_s": 1.0}).encode())
    assert answer["id"] == 4 and answer["ok"] is False
    assert "Not a directory" in answer["error"] and str(tmp_path / "file") in answer["error"]
    assert not any(p.name.startswith(TEST_FILE_PREFIX) for p in tmp_path.iterdir())


def test_the_program_says_hello_answers_in_order_and_ends_at_eof(tmp_path: Path) -> None:
    requests = [{"id": 1, "op": "facts"}, {"id": 2, "op": "clock"}, {"id": 3, "op": "nonsense"},
                {"id": 4, "op": "serve", "address": "127.0.0.1", "ports": []}]
    lines = "".join(json.dumps(r) + "\n" for r in requests) + "not json\n"
    done = subprocess.run([sys.executable, "-m", "worker.doctor"], input=lines.encode(),
                          capture_output=True, cwd=REPO, timeout=30, check=False)
    assert done.returncode == 0, done.stderr
    hello, facts, clock, unknown, serve, bad = (json.loads(x) for x in done.stdout.splitlines())
    assert hello["op"] == "hello" and hello["tfcluster_version"] == TFCLUSTER_VERSION
    assert facts["id"] == 1 and facts["ok"] and facts["cpus"] >= 1
    assert 0 < facts["memory_available"] <= facts["memory_total"]
    assert clock["id"] == 2 and abs(clock["time"] - time.time()) < 60
    assert unknown == {"id": 3, "ok": False, "error": "unknown op 'nonsense'"}
    assert serve["id"] == 4 and serve["ok"] and serve["port"] > 0
    assert bad["ok"] is False and bad["error"].startswith("not a JSON request")
