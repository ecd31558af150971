"""The version check: both ends announce their versions (hello, launch) and read the other's from
the raw JSON before parsing the rest; the coordinator turns a mismatch into one line."""

from __future__ import annotations

import io
import json

import pytest

import worker
from launcher.backends.base import AgentClosed, AgentEvent
from launcher.backends.channel import AgentChannel
from launcher.backends.version_check import VersionMismatch, check_first_line
from launcher.cli.parser import build_parser
from worker.wire.handshake import OURS, Versions, mismatch
from worker.wire.protocol import Hello, Launch, decode_command, decode_event
from worker.wire.version import PROTOCOL_VERSION, TFCLUSTER_VERSION


def hello_line(**fields: object) -> bytes:
    payload = {"type": "hello", "pid": 1, "hostname": "h", "python": "3.11.7", "ts": 0.0,
               **fields}
    return json.dumps(payload).encode() + b"\n"


def test_hello_and_launch_carry_this_ends_versions() -> None:
    for message in (Hello(pid=1, hostname="h", python="3.11.7", ts=0.0),
                    Launch(job="j", attempt=0, tasks=[])):
        raw = json.loads(message.encode())
        assert raw["tfcluster_version"] == TFCLUSTER_VERSION
        assert raw["protocol_version"] == PROTOCOL_VERSION
    assert decode_event(Hello(pid=1, hostname="h", python="3", ts=0.0).encode()) == \
        Hello(pid=1, hostname="h", python="3", ts=0.0)
    assert decode_command(Launch(job="j", attempt=0, tasks=[]).encode()) == \
        Launch(job="j", attempt=0, tasks=[])


@pytest.mark.parametrize(("fields", "theirs"), [
    ({"tfcluster_version": TFCLUSTER_VERSION, "protocol_version": PROTOCOL_VERSION}, None),
    ({"tfcluster_version": "9.9.9", "protocol_version": PROTOCOL_VERSION},
     Versions("9.9.9", PROTOCOL_VERSION)),
    ({"tfcluster_version": TFCLUSTER_VERSION, "protocol_version": PROTOCOL_VERSION + 1},
     Versions(TFCLUSTER_VERSION, PROTOCOL_VERSION + 1)),
    ({}, Versions(None, None)),  # a tfcluster older than the check
    ({"tfcluster_version": 7, "protocol_version": True}, Versions(None, None)),
    # a newer hello whose other fields this version could not parse: its versions still read
    ({"tfcluster_version": "9.9.9", "protocol_version": 2, "new": {"x": [1]}, "pid": "p"},
     Versions("9.9.9", 2)),
], ids=["same", "other-release", "other-protocol", "none", "wrong-types", "unparsable-rest"])
def test_the_versions_are_read_from_the_raw_fields(fields: dict[str, object],
                                                    theirs: Versions | None) -> None:
    assert mismatch(hello_line(**fields), "hello") == theirs


@pytest.mark.parametrize("line", [b"not json\n", b"[1, 2]\n", b'{"type": "started"}\n',
                                  b'{"type": "hello"', b"\xff\xfe\n"])
def test_what_is_not_such_a_message_is_left_to_decoding(line: bytes) -> None:
    assert mismatch(line, "hello") is None


def test_a_launch_is_checked_only_as_a_launch() -> None:
    assert mismatch(b'{"type": "ping"}', "launch") is None
    assert mismatch(b'{"type": "launch"}', "launch") == Versions(None, None)


def test_the_coordinators_refusal_is_one_line_with_host_versions_and_fix() -> None:
    error = check_first_line("node-a", hello_line(tfcluster_version="9.9.9", protocol_version=1))
    assert isinstance(error, VersionMismatch)
    text = str(error)
    assert "\n" not in text
    assert text.startswith("node-a: tfcluster 9.9.9 (protocol 1) there, but the coordinator runs "
                           f"tfcluster {TFCLUSTER_VERSION} (protocol {PROTOCOL_VERSION})")
    assert f"install tfcluster {TFCLUSTER_VERSION} on node-a" in text
    assert "'python'" in text
    assert "older than the version check" in str(check_first_line("n", hello_line()))
    assert check_first_line("n", Hello(pid=1, hostname="h", python="3", ts=0.0).encode()) is None
    assert str(OURS) == f"tfcluster {TFCLUSTER_VERSION} (protocol {PROTOCOL_VERSION})"


def test_the_channel_refuses_an_agent_of_another_version_and_closes_its_input() -> None:
    events: list[AgentEvent] = []
    later = b'{"type":"terminated","ts":1.0}\n'
    reader = io.BytesIO(hello_line(tfcluster_version="9.9.9", protocol_version=1) + later)
    writer = io.BytesIO()
    channel = AgentChannel("node-a", reader, writer, events.append)
    channel.start()
    assert channel.join(5)
    assert isinstance(channel.refused, VersionMismatch)
    assert writer.closed  # EOF: the agent exits without a launch
    assert len(events) == 1  # neither its hello nor anything after it reaches the sink
    closed = events[0]
    assert isinstance(closed, AgentClosed) and closed.refused is channel.refused
    assert closed.reason == str(channel.refused)


def test_the_channel_lets_its_own_version_through() -> None:
    events: list[AgentEvent] = []
    hello = Hello(pid=1, hostname="h", python="3", ts=0.0)
    channel = AgentChannel("n", io.BytesIO(hello.encode()), io.BytesIO(), events.append)
    channel.start()
    assert channel.join(5)
    assert channel.refused is None
    assert [type(e).__name__ for e in events] == ["AgentMessage", "AgentClosed"]
    assert isinstance(events[1], AgentClosed) and events[1].refused is None


def test_tfcluster_version_prints_the_one_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        build_parser().parse_args(["--version"])
    assert info.value.code == 0
    assert capsys.readouterr().out == f"tfcluster {TFCLUSTER_VERSION}\n"
    assert worker.__version__ == TFCLUSTER_VERSION
