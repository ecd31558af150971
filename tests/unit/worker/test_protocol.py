"""The agent protocol: every message survives the wire, and anything else is a ProtocolError."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import fields

import pytest

from worker.wire.protocol import (
    COMMANDS,
    EVENTS,
    AgentError,
    DumpStacks,
    Exited,
    FillSpares,
    Heartbeat,
    Hello,
    Launch,
    Message,
    Output,
    Pause,
    Ping,
    Progress,
    ProtocolError,
    SignalTasks,
    StacksDumped,
    Started,
    StartTask,
    StopAt,
    StopTask,
    TaskLaunch,
    TaskReport,
    TaskUsage,
    Terminate,
    Terminated,
    decode_command,
    decode_event,
)

TF_CONFIG = '{"cluster":{"worker":["localhost:21000","localhost:21001"]},"task":{"index":0,"type":"worker"}}'

COMMAND_MESSAGES = [
    Launch(job="digits", attempt=2, heartbeat_interval_s=0.5, grace_period_s=7.0, tasks=[
        TaskLaunch(task="worker:0", argv=["python3", "-m", "worker.runtime.bootstrap", "-m", "train"],
                   env={"TF_CONFIG": TF_CONFIG, "TFCLUSTER_TASK": "worker:0"}, cwd="/work"),
        TaskLaunch(task="worker:1", argv=["bash", "-c", "echo 'hi there'"], env={}, cwd="/"),
    ]),
    Launch(job="empty", attempt=0, tasks=[]),
    SignalTasks(signal="SIGTERM"),
    SignalTasks(signal="SIGUSR1", task="worker:1"),
    DumpStacks(),
    Ping(),
    Pause(),
    Terminate(grace_period_s=10.0),
    StartTask(task=TaskLaunch(task="worker:1", argv=["python3", "-m", "worker.server"],
                              env={"TFCLUSTER_TASK": "worker:1"}, cwd="/work")),
    StopTask(task="chief:0", grace_period_s=2.5),
    StopAt(task="worker:1", step=153),
    FillSpares(why="the attempt's first checkpoint appeared: /ckpt/ckpt-30"),
    Launch(job="watched", attempt=1, tasks=[], cluster={"worker": ["h:1", "h:2"]},
           coordinator_timeout_s=15.0),
]

EVENT_MESSAGES = [
    Hello(pid=4242, hostname="node-a", python="3.11.7", ts=1700000000.5),
    Started(task="chief:0", pid=4243, ts=1700000001.0),
    Output(task="worker:1", stream="stderr", line="W0000 some \"quoted\" \u00e9 text\ttab"),
    Progress(task="worker:0", step=120, ts=1.5, metrics={"loss": 0.25, "acc": 0.9, "note": "x"}),
    Progress(task="worker:0", step=0, ts=1.5),
    TaskReport(task="chief:0", kind="restore_failed", ts=2.0, data={"checkpoint": "/c/ckpt-3"}),
    Heartbeat(ts=3.0, tasks={"worker:0": TaskUsage(pid=11, cpu_percent=97.5, rss_bytes=123456789),
                             "worker:1": TaskUsage(pid=12, cpu_percent=0.0, rss_bytes=1)}),
    Heartbeat(ts=3.0),
    StacksDumped(),
    StacksDumped(unfinished=["worker:1"]),
    Exited(task="worker:1", ts=4.0, exit_code=1, traceback="Traceback ...\nValueError: x\n",
           stderr_tail=["a", "b"]),
    Exited(task="worker:0", ts=4.0, signal="SIGKILL"),
    Exited(task="worker:2", ts=4.0, error="no such program: trainx"),
    Terminated(ts=5.0),
    AgentError(message="cannot read the launch message"),
]


def _name(message: Message) -> str:
    return type(message).__name__


@pytest.mark.parametrize("message", COMMAND_MESSAGES, ids=_name)
def test_commands_round_trip(message: Message) -> None:
    line = message.encode()
    assert line.endswith(b"\n") and line.count(b"\n") == 1
    assert json.loads(line)["type"] == message.TYPE
    assert decode_command(line) == message
    assert decode_command(line.decode()) == message


@pytest.mark.parametrize("message", EVENT_MESSAGES, ids=_name)
def test_events_round_trip(message: Message) -> None:
    line = message.encode()
    assert line.endswith(b"\n") and line.count(b"\n") == 1
    assert json.loads(line)["type"] == message.TYPE
    assert decode_event(line) == message
    assert decode_event(line.decode()) == message


def test_nested_messages_decode_to_their_classes() -> None:
    launch = decode_command(COMMAND_MESSAGES[0].encode())
    assert isinstance(launch, Launch)
    assert all(isinstance(t, TaskLaunch) for t in launch.tasks)
    heartbeat = decode_event(EVENT_MESSAGES[6].encode())
    assert isinstance(heartbeat, Heartbeat)
    assert heartbeat.tasks["worker:0"].rss_bytes == 123456789
    assert all(isinstance(u, TaskUsage) for u in heartbeat.tasks.values())


def test_every_message_class_is_covered_here() -> None:
    assert {type(m) for m in COMMAND_MESSAGES} == set(COMMANDS.values())
    assert {type(m) for m in EVENT_MESSAGES} == set(EVENTS.values())


def test_commands_and_events_are_separate_tables() -> None:
    assert not set(COMMANDS) & set(EVENTS)
    assert set(COMMANDS) == {"launch", "signal", "dump_stacks", "ping", "pause", "start_task",
                             "stop_task", "stop_at", "fill_spares", "terminate"}
    assert {"hello", "started", "output", "progress", "heartbeat", "exited", "terminated",
            "agent_error"} <= set(EVENTS)
    for cls in COMMANDS.values():
        with pytest.raises(ProtocolError, match="unknown message type"):
            decode_event(json.dumps({"type": cls.TYPE}))
    for cls in EVENTS.values():
        with pytest.raises(ProtocolError, match="unknown message type"):
            decode_command(json.dumps({"type": cls.TYPE}))


def _launch_with_task(task: object) -> str:
    return json.dumps({"type": "launch", "job": "j", "attempt": 0, "tasks": [task]})


GOOD_TASK = {"task": "worker:0", "argv": ["x"], "env": {}, "cwd": "/"}

BAD_LINES = [
    pytest.param(decode_command, "", id="empty"),
    pytest.param(decode_command, "launch", id="not-json"),
    pytest.param(decode_command, b'{"type": "terminate", "grace_period_s": "\xff"}', id="not-utf8"),
    pytest.param(decode_command, "[1, 2]", id="list"),
    pytest.param(decode_event, "null", id="null"),
    pytest.param(decode_event, '"hello"', id="string"),
    pytest.param(decode_event, "3", id="number"),
    pytest.param(decode_command, "{}", id="no-type"),
    pytest.param(decode_command, '{"type": 3}', id="type-not-string"),
    pytest.param(decode_command, '{"type": "reboot"}', id="unknown-command"),
    pytest.param(decode_event, '{"type": "exploded", "task": "w"}', id="unknown-event"),
    pytest.param(decode_command, '{"type": "terminate", "grace_period_s": 1, "force": true}',
                 id="unknown-field"),
    pytest.param(decode_event, '{"type": "started", "task": "w", "pid": 1, "ts": 0, "host": "h"}',
                 id="unknown-event-field"),
    pytest.param(decode_command, '{"type": "terminate"}', id="missing-field"),
    pytest.param(decode_event, '{"type": "started", "task": "w"}', id="missing-event-fields"),
    pytest.param(decode_command, _launch_with_task({**GOOD_TASK, "shell": True}),
                 id="unknown-field-in-task-launch"),
    pytest.param(decode_command, _launch_with_task({"task": "worker:0"}),
                 id="missing-field-in-task-launch"),
    pytest.param(decode_command, _launch_with_task("worker:0"), id="task-launch-not-object"),
    pytest.param(decode_command, json.dumps({"type": "launch", "job": "j", "attempt": 0,
                                             "tasks": "worker:0"}), id="tasks-not-a-list"),
    pytest.param(decode_event, json.dumps({"type": "heartbeat", "ts": 1,
                                           "tasks": {"w": {"pid": 1, "cpu_percent": 0}}}),
                 id="missing-field-in-task-usage"),
    pytest.param(decode_event, json.dumps({"type": "heartbeat", "ts": 1,
                                           "tasks": {"w": {"pid": 1, "cpu_percent": 0,
                                                           "rss_bytes": 1, "gpu": 1}}}),
                 id="unknown-field-in-task-usage"),
    pytest.param(decode_event, json.dumps({"type": "heartbeat", "ts": 1, "tasks": [1]}),
                 id="usage-not-a-mapping"),
]


@pytest.mark.parametrize(("decode", "line"), BAD_LINES)
def test_anything_else_is_a_protocol_error(decode: Callable[[bytes | str], Message],
                                           line: bytes | str) -> None:
    with pytest.raises(ProtocolError):
        decode(line)


def test_unknown_field_error_names_the_field() -> None:
    with pytest.raises(ProtocolError, match="force"):
        decode_command('{"type": "terminate", "grace_period_s": 1, "force": true}')


def test_wire_form_is_fields_plus_type() -> None:
    for message in [*COMMAND_MESSAGES, *EVENT_MESSAGES]:
        payload = json.loads(message.encode())
        assert set(payload) == {"type"} | {f.name for f in fields(message)}
