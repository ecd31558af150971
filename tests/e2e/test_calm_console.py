"""What a person sees when a real MWMS job loses a task and restarts: the console, stdout and
stderr together as a terminal shows them (digits, 2 workers, worker:1 SIGKILLed at step 120).

- the root cause comes before anything the survivor printed about the failure, and the survivor
  then gets one line (how tfcluster stopped it, where its log is);
- no traceback of the survivor and none of TensorFlow's start-up noise reaches the console
  (the task logs have them: the filter is what keeps them out);
- every task line on the console is in that task's log.
"""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from launcher.run.noise import hidden_by_default, is_startup_noise
from tests.e2e.tfjobs import JOB_TIMEOUT_S, TEST_TIMEOUT_S, requires_tf
from tests.support import procs
from tests.support.jobs import MARK_VAR, REPO, processes_marked, read_events, wait_until_gone

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(TEST_TIMEOUT_S), requires_tf]

SPEC = REPO / "cluster_specs" / "local-2workers.yaml"
KILLED, SURVIVOR = "worker:1", "worker:0"
_TASK_LINE = re.compile(r"^\[(\w+:\d+)\]\s(.*)$")


@contextlib.contextmanager
def terminal(tmp_path: Path, argv: list[str]) -> Iterator[subprocess.Popen[bytes]]:
    """``tfcluster ARGV`` with stdout and stderr into one file, as a terminal interleaves them;
    every process of the job is killed whatever the test does."""
    mark = uuid.uuid4().hex
    (tmp_path / "tmp").mkdir()
    env = {**os.environ, MARK_VAR: mark, "NO_COLOR": "1", "TMPDIR": str(tmp_path / "tmp")}
    with (tmp_path / "console.txt").open("wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", "launcher", *argv], stdout=out,
                                stderr=subprocess.STDOUT, cwd=REPO, env=env)
    try:
        yield proc
        proc.wait(JOB_TIMEOUT_S)
        assert wait_until_gone(mark, 15) == [], "processes left behind"
    finally:
        procs.kill_all(processes_marked(mark), timeout=None)
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
        proc.wait(10)


def test_a_crash_and_restart_reads_calmly(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    argv = ["drill", str(SPEC), "--task", KILLED, "--at-step", "120", "--fault", "kill",
            "--checkpoint-dir", str(tmp_path / "ckpt"), "--run-dir", str(run_dir)]
    with terminal(tmp_path, argv) as proc:
        pass
    console = (tmp_path / "console.txt").read_text().splitlines()
    assert proc.returncode == 0, "\n".join(console)
    shown = "\n".join(console)

    def index(text: str) -> int:
        found = [i for i, line in enumerate(console) if text in line]
        assert found, f"no line with {text!r} in:\n{shown}"
        return found[0]

    injected = index(f"injected into {KILLED}")
    cause = index("Root cause (first observed failure)")
    restart = index("restarting the job")
    assert injected < cause < restart, shown
    assert "was killed by SIGKILL" in console[cause] and KILLED in console[cause]
    # the survivor's one line: tfcluster stopped it (or, had it died of the lost peer before
    # tfcluster stopped it, it would be listed among the other failures)
    about = [line for line in console[cause + 1:restart] if SURVIVOR in line]
    assert len(about) == 1, shown
    stopped = re.search(r"(stopped|killed) by tfcluster \(SIG(TERM|KILL)", about[0])
    assert stopped or about[0].startswith(f"tfcluster:   - {SURVIVOR} on"), shown
    if stopped:
        assert str(run_dir / "attempt-0" / "worker-0.log") in about[0]
    # from the fault to the restart line, nothing of the tasks' own output reaches the console
    assert [line for line in console[injected:restart] if _TASK_LINE.match(line)] == [], shown

    task_lines = [(m[1], m[2]) for line in console if (m := _TASK_LINE.match(line))]
    assert not [line for _, line in task_lines if "Traceback" in line or hidden_by_default(line)]
    events = read_events(run_dir)
    attempts = sorted({e["attempt"] for e in events if e["event"] == "attempt_started"})
    assert attempts == [0, 1]
    logs = {task: "\n".join((run_dir / f"attempt-{a}" / f"{task.replace(':', '-')}.log")
                            .read_text() for a in attempts)
            for task in (KILLED, SURVIVOR)}
    assert any(is_startup_noise(line) for line in logs[SURVIVOR].splitlines()), \
        "TF printed no start-up noise: this test would prove nothing"
    missing = [(task, line) for task, line in task_lines if line not in logs[task]]
    assert missing == []
