"""Versions agree or nothing starts: the agent refuses a launch from another tfcluster version
before it starts anything (the coordinator's half, a run refused with one line, is tested over
SSH: tests/ssh/test_version_mismatch.py). And a ``worker.py`` of the user's in the workdir cannot
stand in for tfcluster's ``worker``, for the agent or the task."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import worker
from tests.support.jobs import write_spec
from tests.support.other_version import OTHER_VERSION
from worker.wire.module_start import agent_argv
from worker.wire.protocol import Launch, TaskLaunch
from worker.wire.version import PROTOCOL_VERSION, TFCLUSTER_VERSION

pytestmark = pytest.mark.timeout(120)


def _launch_line(marker: Path, **versions: object) -> bytes:
    task = TaskLaunch("worker:0", ["touch", str(marker)], {}, str(marker.parent))
    payload = json.loads(Launch(job="j", attempt=0, tasks=[task]).encode())
    payload.update(versions)
    return json.dumps({k: v for k, v in payload.items() if v is not None}).encode() + b"\n"


@pytest.mark.parametrize(("versions", "theirs"), [
    ({"tfcluster_version": OTHER_VERSION}, f"tfcluster {OTHER_VERSION} (protocol "
                                           f"{PROTOCOL_VERSION})"),
    ({"protocol_version": PROTOCOL_VERSION + 1},
     f"tfcluster {TFCLUSTER_VERSION} (protocol {PROTOCOL_VERSION + 1})"),
    ({"tfcluster_version": None, "protocol_version": None},
     "a tfcluster older than the version check"),
], ids=["release", "protocol", "older"])
def test_the_agent_refuses_a_launch_from_another_version_and_starts_nothing(
        tmp_path: Path, versions: dict[str, object], theirs: str) -> None:
    marker = tmp_path / "started"
    proc = subprocess.run(agent_argv(sys.executable), input=_launch_line(marker, **versions),
                          capture_output=True, timeout=30, check=False, cwd=tmp_path)
    assert proc.returncode == 3, proc.stderr
    hello, error = (json.loads(line) for line in proc.stdout.splitlines())
    assert hello["type"] == "hello"
    assert (hello["tfcluster_version"], hello["protocol_version"]) == (TFCLUSTER_VERSION,
                                                                       PROTOCOL_VERSION)
    assert error["type"] == "agent_error"
    assert error["message"].startswith(f"launch refused: tfcluster {TFCLUSTER_VERSION} (protocol "
                                       f"{PROTOCOL_VERSION}) here, {theirs} on the coordinator")
    assert not marker.exists()
    assert b"Traceback" not in proc.stderr


#: The console script, as a user runs it (``python -m launcher`` would put the cwd first on the
#: coordinator's own path).
TFCLUSTER = Path(sys.executable).parent / "tfcluster"


@pytest.mark.parametrize("entrypoint", [{"module": "train"}, {"script": "train.py"}],
                         ids=["module", "script"])
def test_a_worker_py_in_the_workdir_does_not_shadow_tfclusters(
        tmp_path: Path, entrypoint: dict[str, str]) -> None:
    (tmp_path / "worker.py").write_text("raise RuntimeError('the user worker.py was imported')\n")
    (tmp_path / "helper.py").write_text("VALUE = 42\n")
    (tmp_path / "train.py").write_text(
        "import os, sys\nimport worker\nimport helper\n"
        "print('WORKER', worker.__file__, worker.__version__, helper.VALUE,"
        " sys.path[0] == os.getcwd())\nworker.report(1)\n")
    spec = write_spec(tmp_path, {"name": "shadow", "workdir": ".", "entrypoint": entrypoint,
                                 "tasks": [{"type": "worker", "count": 2}]})
    # run in the workdir: the local agent's cwd holds the worker.py too
    done = subprocess.run([str(TFCLUSTER), "run", str(spec), "--run-dir", str(tmp_path / "run")],
                          cwd=tmp_path, capture_output=True, text=True, timeout=90, check=False,
                          env={**os.environ, "NO_COLOR": "1"})
    assert done.returncode == 0, done.stderr
    seen = [line.split()[2:] for line in done.stdout.splitlines() if " WORKER " in line]
    package = str(Path(worker.__file__).resolve())
    assert seen == [[package, TFCLUSTER_VERSION, "42", "True"]] * 2, done.stdout
