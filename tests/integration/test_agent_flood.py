"""An output flood, or a coordinator that stops reading, delays no exit, heartbeat or command:
the agent reads a bounded amount per pipe and turn, relays each stream within its budget (and says
what it dropped), and queues its messages without ever blocking on its stdout."""

from __future__ import annotations

import itertools
import re
import sys
import time
from pathlib import Path

import psutil
import pytest

from tests.support.agent_harness import AgentUnderTest, agent, wait_for
from worker.wire.protocol import Exited, Heartbeat, Launch, Output, Started, TaskLaunch

pytestmark = pytest.mark.timeout(90)

HEARTBEAT_S = 0.2
#: Gaps between heartbeats much longer than their interval mean the agent was held up.
MAX_HEARTBEAT_GAP_S = 1.0
MAX_AGENT_RSS = 200 * 1024 * 1024
NOTICE = re.compile(r"^\[tfcluster\] dropped (\d+) lines \((\d+) bytes\) of stdout: ")

#: 64 KiB lines, a MiB per write into a pipe grown to a MiB: the pipe is never empty.
FLOOD = """
import fcntl, os
fcntl.fcntl(1, fcntl.F_SETPIPE_SZ, 1 << 20)
lines = (b"x" * 65535 + b"\\n") * 16
while True:
    os.write(1, lines)
"""
#: Lives about a second, notes the time, says its last words and dies at once with 13.
QUITTER = """
import os, sys, time
time.sleep(1.0)
os.write(1, b"last words\\n")
with open(sys.argv[1], "w") as out:
    out.write(repr(time.time()))
os._exit(13)
"""
#: The same, but it dies only once the file argv[2] exists.
QUITTER_ON_CUE = QUITTER.replace("time.sleep(1.0)",
                                 "while not os.path.exists(sys.argv[2]):\n    time.sleep(0.01)")


def python_task(tmp_path: Path, name: str, code: str, *args: str) -> TaskLaunch:
    script = tmp_path / f"{name.replace(':', '-')}.py"
    script.write_text(code)
    return TaskLaunch(task=name, argv=[sys.executable, str(script), *args], env={},
                      cwd=str(tmp_path))


def rss(a: AgentUnderTest) -> int:
    return int(psutil.Process(a.proc.pid).memory_info().rss)


def heartbeat_gaps(a: AgentUnderTest, since: float) -> list[float]:
    arrivals = [at for at, message in a.seen if isinstance(message, Heartbeat) and at >= since]
    return [later - earlier for earlier, later in itertools.pairwise(arrivals)]


def test_an_output_flood_delays_neither_an_exit_nor_a_heartbeat(tmp_path: Path) -> None:
    death = tmp_path / "died-at"
    launch = Launch(job="t", attempt=0, heartbeat_interval_s=HEARTBEAT_S, tasks=[
        python_task(tmp_path, "worker:0", FLOOD),
        python_task(tmp_path, "worker:1", QUITTER, str(death))])
    with agent(launch) as a:
        began = a.next_timed(Started, task="worker:0")[0]
        a.next_of(Started, task="worker:1")
        arrived, exited = a.next_timed(Exited, task="worker:1", timeout=30)
        died_at = float(death.read_text())
        assert exited.exit_code == 13
        # reaped the moment it died, not once the flood let up (the stall below lasts 2 s)
        assert exited.ts - died_at < 1.5
        assert arrived - died_at < 5.0
        peak = rss(a)
        notices = []
        while time.time() < arrived + 2.0:  # the flood goes on: heartbeats and notices too
            notice = a.next_of(Output, task="worker:0", timeout=10)
            if NOTICE.match(notice.line):
                notices.append(notice.line)
            peak = max(peak, rss(a))
        assert notices, "no notice of the dropped lines"
        gaps = heartbeat_gaps(a, since=began)
        assert len(gaps) >= 10 and max(gaps) < MAX_HEARTBEAT_GAP_S, gaps
        assert peak < MAX_AGENT_RSS
        assert a.proc.poll() is None


def test_a_coordinator_that_stops_reading_holds_up_nothing(tmp_path: Path) -> None:
    death, cue = tmp_path / "died-at", tmp_path / "die-now"
    launch = Launch(job="t", attempt=0, heartbeat_interval_s=HEARTBEAT_S, tasks=[
        python_task(tmp_path, "worker:0", FLOOD),
        python_task(tmp_path, "worker:1", QUITTER_ON_CUE, str(death), str(cue))])
    with agent(launch) as a:
        a.next_of(Started, task="worker:0")
        a.next_of(Started, task="worker:1")
        a.pause_reading()
        cue.touch()
        wait_for(death.exists, timeout=10)
        stall_ends = time.monotonic() + 10 * HEARTBEAT_S  # the stall itself: nobody reads
        peak = 0
        while time.monotonic() < stall_ends:
            assert a.proc.poll() is None, a.stderr
            peak = max(peak, rss(a))
            time.sleep(HEARTBEAT_S / 2)
        resumed_at = time.time()
        a.resume_reading()
        arrived, exited = a.next_timed(Exited, task="worker:1", timeout=10)
        assert exited.exit_code == 13
        assert abs(exited.ts - float(death.read_text())) < 1.5  # reaped during the 2 s stall
        assert arrived - resumed_at < 5.0
        last_words = [m for _, m in a.seen if isinstance(m, Output) and m.task == "worker:1"]
        assert [m.line for m in last_words] == ["last words"]  # it came before the Exited
        heartbeat_at = 0.0
        while heartbeat_at <= arrived:  # heartbeats come again (the ones queued came first)
            heartbeat_at, _ = a.next_timed(Heartbeat, timeout=5)
        assert peak < MAX_AGENT_RSS
        assert a.proc.poll() is None


def test_output_beyond_the_budget_is_dropped_counted_and_noticed(tmp_path: Path) -> None:
    lines = 100_000
    code = (f"import os\nfor i in range({lines}):\n"
            "    os.write(1, b'%06d' % i + b'.' * 94 + b'\\n')\n")
    launch = Launch(job="t", attempt=0, tasks=[python_task(tmp_path, "worker:0", code)])
    with agent(launch) as a:
        assert a.next_of(Exited, timeout=30).exit_code == 0
        outputs = [m.line for _, m in a.seen if isinstance(m, Output)]
        notices = [NOTICE.match(line) for line in outputs if NOTICE.match(line)]
        relayed = [int(line[:6]) for line in outputs if not NOTICE.match(line)]
        assert notices
        assert relayed == sorted(relayed)
        assert len(relayed) + sum(int(n.group(1)) for n in notices if n) == lines


def test_everything_a_task_wrote_before_dying_comes_before_its_exit(tmp_path: Path) -> None:
    code = ("import os\nfor i in range(2000):\n    os.write(1, b'%06d' % i + b'-' * 1018 + b'\\n')\n"
            "os._exit(0)\n")
    launch = Launch(job="t", attempt=0, tasks=[python_task(tmp_path, "worker:0", code)])
    with agent(launch) as a:
        a.next_of(Exited, timeout=30)
        relayed = [int(m.line[:6]) for _, m in a.seen if isinstance(m, Output)]
        assert relayed == list(range(2000))
