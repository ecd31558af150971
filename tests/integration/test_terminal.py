"""Where tfcluster's output goes must never harm the job: a reader that stalls for longer than the
heartbeat timeout (a pager, Ctrl-S, a slow ``tee``), and one that goes away (``| head -2``).

Real processes: tfcluster runs as a user runs it, its stdout a pipe this test controls."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from tests.support import jobs, procs

#: Prints numbered ~200-byte lines at about 400 KB/s (within the agent's per-task output budget,
#: so every line reaches the coordinator) for a while, then exits 0.
CHATTY = """\
import sys, time
end = time.monotonic() + float(sys.argv[1])
n = 0
while time.monotonic() < end:
    for _ in range(100):
        n += 1
        print(f"line {n} " + "x" * 190, flush=True)
    time.sleep(0.05)
print(f"total {n}", flush=True)
"""


def chatty_spec(tmp_path: Path, seconds: float) -> Path:
    script = tmp_path / "chatty.py"
    script.write_text(CHATTY)
    spec = {
        "name": "chatty",
        "entrypoint": {"command": [sys.executable, str(script), str(seconds)]},
        "tasks": [{"type": "worker", "count": 2}],
        "restart": {"max_restarts": 0},
        # a blocked coordinator would be declared lost by its agents after 2 s
        "health": {"heartbeat_interval_s": 0.5, "heartbeat_timeout_s": 2.0, "grace_period_s": 3},
    }
    path = tmp_path / "chatty.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


@contextlib.contextmanager
def tfcluster_piped(tmp_path: Path, spec: Path) -> Iterator[subprocess.Popen[bytes]]:
    mark = uuid.uuid4().hex
    env = {**os.environ, jobs.MARK_VAR: mark, "NO_COLOR": "1"}
    proc = subprocess.Popen([sys.executable, "-m", "launcher", "run", str(spec), "--run-dir",
                             str(tmp_path / "run")], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, cwd=tmp_path, env=env)
    try:
        yield proc
    finally:
        procs.kill_all(jobs.processes_marked(mark), timeout=None)
        if proc.poll() is None:
            proc.kill()
        proc.wait(10)
        assert proc.stdout is not None and proc.stderr is not None
        proc.stdout.close()
        proc.stderr.close()


def lines_in_logs(run_dir: Path) -> dict[str, list[str]]:
    return {log.name: log.read_text().splitlines()
            for log in sorted((run_dir / "attempt-0").glob("worker-*.log"))}


@pytest.mark.timeout(90)
def test_a_reader_that_stalls_longer_than_the_heartbeat_timeout_does_not_harm_the_job(
        tmp_path: Path) -> None:
    with tfcluster_piped(tmp_path, chatty_spec(tmp_path, seconds=5.0)) as proc:
        # nobody reads stdout or stderr until tfcluster has exited: the pipes fill at once
        code = proc.wait(timeout=60)
        assert proc.stdout is not None and proc.stderr is not None
        shown = proc.stdout.read().decode()
        said = proc.stderr.read().decode()
    assert code == 0, said
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["status"] == "succeeded"
    assert "lost" not in said and "Traceback" not in said
    logs = lines_in_logs(tmp_path / "run")
    assert len(logs) == 2
    for lines in logs.values():  # every line the tasks wrote is in their logs
        total = int(lines[-1].split()[1])
        assert [int(line.split()[1]) for line in lines[:-1]] == list(range(1, total + 1))
    assert shown.count("\n") < sum(len(lines) for lines in logs.values())  # some were dropped


@pytest.mark.timeout(90)
def test_a_reader_that_goes_away_stops_the_echo_not_the_job(tmp_path: Path) -> None:
    with tfcluster_piped(tmp_path, chatty_spec(tmp_path, seconds=3.0)) as proc:
        assert proc.stdout is not None and proc.stderr is not None
        first = [proc.stdout.readline() for _ in range(2)]  # what `| head -2` does
        proc.stdout.close()
        code = proc.wait(timeout=60)
        said = proc.stderr.read().decode()
    assert all(line.startswith(b"[worker:") for line in first)
    assert code == 0, said
    assert "Traceback" not in said and "BrokenPipe" not in said
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["status"] == "succeeded"
    assert all(lines[-1].startswith("total ") for lines in lines_in_logs(tmp_path / "run").values())
