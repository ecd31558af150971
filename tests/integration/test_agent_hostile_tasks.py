"""Nothing a task writes or does can stop the agent: bad report lines become ``agent_error``
messages, unstartable tasks become their own ``exited``, and a huge traceback is kept, shortened
to its head and its tail, never lost."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.support.agent_harness import AgentUnderTest, agent, script_task
from worker.wire.protocol import (
    AgentError,
    Exited,
    Launch,
    Output,
    Progress,
    Started,
    TaskLaunch,
    Terminate,
    Terminated,
)
from worker.wire.reports import MAX_REPORT_LINE_BYTES, MAX_TRACEBACK_CHARS

pytestmark = pytest.mark.timeout(60)

#: Writes the bytes of the file argv[1] as one report line, then a good report, then exits 3.
WRITE_REPORT_LINE = """
import os, sys
fd = int(os.environ["TFCLUSTER_REPORT_FD"])
with open(sys.argv[1], "rb") as line:
    os.write(fd, line.read() + b"\\n")
os.write(fd, b'{"kind":"progress","step":7}\\n')
sys.exit(3)
"""


def assert_still_serving(a: AgentUnderTest) -> None:
    """The agent is alive and its loop still obeys commands."""
    assert a.proc.poll() is None, a.stderr
    a.send(Terminate(grace_period_s=0.1))
    a.next_of(Terminated, timeout=10)
    assert a.proc.poll() is None, a.stderr


def test_an_exception_message_over_64_kib_arrives_whole(tmp_path: Path) -> None:
    code = 'raise ValueError("boom " + "x" * 100_000 + " end")\n'
    with agent(Launch(job="t", attempt=0, tasks=[script_task(tmp_path, "worker:0", code)])) as a:
        exited = a.next_of(Exited)
        assert exited.exit_code == 1
        assert exited.traceback is not None
        assert exited.traceback.rstrip("\n").endswith("ValueError: boom " + "x" * 100_000 + " end")
        assert_still_serving(a)


def test_a_traceback_over_the_limit_keeps_its_head_and_its_final_line(tmp_path: Path) -> None:
    code = ("try:\n    raise ValueError('y' * 3_000_000)\n"
            "except ValueError:\n    raise RuntimeError('final-line-marker')\n")
    with agent(Launch(job="t", attempt=0, tasks=[script_task(tmp_path, "worker:0", code)])) as a:
        exited = a.next_of(Exited)
        assert exited.exit_code == 1
        assert exited.traceback is not None
        assert exited.traceback.startswith("Traceback (most recent call last):")
        assert exited.traceback.rstrip("\n").endswith("RuntimeError: final-line-marker")
        assert "characters cut" in exited.traceback
        assert len(exited.traceback) < MAX_TRACEBACK_CHARS + 100
        assert_still_serving(a)


UNSTARTABLE = [
    pytest.param({"env": {"PYTHONUNBUFFERED": "1", "BAD": "a\0b"}}, id="nul-in-env-value"),
    pytest.param({"argv": [sys.executable, "-c", "pass\0"]}, id="nul-in-argument"),
    pytest.param({"cwd": "/tm\0p"}, id="nul-in-cwd"),
    pytest.param({"argv": ["/no/such/program"]}, id="no-such-program"),
]


@pytest.mark.parametrize("change", UNSTARTABLE)
def test_a_task_that_cannot_start_exits_127_and_the_others_run(
        tmp_path: Path, change: dict[str, Any]) -> None:
    bad = dataclasses.replace(TaskLaunch(task="worker:0", argv=[sys.executable, "-c", "pass"],
                                         env={}, cwd=str(tmp_path)), **change)
    good = TaskLaunch(task="worker:1", argv=[sys.executable, "-c", "print('fine')"], env={},
                      cwd=str(tmp_path))
    with agent(Launch(job="t", attempt=0, tasks=[bad, good])) as a:
        failed = a.next_of(Exited, task="worker:0")
        assert failed.exit_code == 127
        assert failed.error is not None and "cannot start" in failed.error
        a.next_of(Started, task="worker:1")
        assert a.next_of(Output, task="worker:1").line == "fine"
        assert a.next_of(Exited, task="worker:1").exit_code == 0
        assert_still_serving(a)


BAD_REPORT_LINES = [
    pytest.param(b'{"kind": "progress", "step": "abc"}', id="step-not-a-number"),
    pytest.param(b'{"kind":"progress","step":1e400}', id="step-infinite"),
    pytest.param(b'{"kind":"progress","step":null}', id="step-null"),
    pytest.param(b'{"kind":"progress","step":1,"metrics":[1,2]}', id="metrics-not-an-object"),
    pytest.param(b'{"kind":"progress","step":1,"metrics":{"a":"\xff\xfe"}}', id="not-utf8"),
    pytest.param(b"[1, 2, 3]", id="a-list"),
    pytest.param(b"hello", id="not-json"),
    pytest.param(b'{"kind": 5}', id="kind-not-a-string"),
    pytest.param(b'{"kind":"progress","step":' + b"9" * 5000 + b"}", id="too-many-digits"),
    pytest.param(b"[" * 100_000, id="nested-too-deep-to-parse"),
    pytest.param(b'{"kind":"note","d":' + b"[" * 900 + b"]" * 900 + b"}",
                 id="nested-too-deep-to-relay"),
    pytest.param(b'{"kind":"error","traceback":["not","text"]}', id="traceback-not-a-string"),
    pytest.param(b'{"kind":"note","pad":"' + b"x" * (MAX_REPORT_LINE_BYTES + 10) + b'"}',
                 id="longer-than-the-line-limit"),
]


@pytest.mark.parametrize("line", BAD_REPORT_LINES)
def test_a_bad_report_line_is_an_agent_error_and_the_agent_goes_on(tmp_path: Path,
                                                                   line: bytes) -> None:
    (tmp_path / "line").write_bytes(line)
    script = tmp_path / "report.py"
    script.write_text(WRITE_REPORT_LINE)
    task = TaskLaunch(task="worker:0", argv=[sys.executable, str(script), str(tmp_path / "line")],
                      env={}, cwd=str(tmp_path))
    with agent(Launch(job="t", attempt=0, tasks=[task])) as a:
        error = a.next_of(AgentError)
        assert error.message.startswith("worker:0: ")
        assert len(error.message) <= 1000
        assert a.next_of(Progress).step == 7  # the next good line still counts
        assert a.next_of(Exited).exit_code == 3
        assert_still_serving(a)


def test_output_that_is_not_utf8_is_relayed_with_replacement_characters(tmp_path: Path) -> None:
    code = "import os\nos.write(1, b'\\xff\\xfe odd \\x00 bytes\\n')\n"
    with agent(Launch(job="t", attempt=0, tasks=[script_task(tmp_path, "worker:0", code)])) as a:
        assert a.next_of(Output).line == "\ufffd\ufffd odd \x00 bytes"
        assert a.next_of(Exited).exit_code == 0
        assert_still_serving(a)
