"""``tfcluster doctor`` on a spec whose tasks all run on this machine: no links to measure (one
line says so), the host and the checkpoint dir still measured, nothing left behind; a host that
cannot run the program is one line and exit 1."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.support.jobs import REPO, fake_spec, write_spec

pytestmark = pytest.mark.timeout(90)


def doctor(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "launcher", "doctor", *args],
                          capture_output=True, text=True, cwd=cwd, timeout=60, check=False,
                          env={**os.environ, "NO_COLOR": "1"})


def spec_file(tmp_path: Path, **fields: Any) -> Path:
    return write_spec(tmp_path, fake_spec("doc", tasks=[{"type": "chief"},
                                                       {"type": "worker", "count": 2}],
                                          workdir=str(REPO), **fields))


def test_a_single_host_spec_has_no_links_but_its_host_and_storage_are_measured(
        tmp_path: Path) -> None:
    checkpoints = tmp_path / "not-yet" / "ckpt"
    spec = spec_file(tmp_path, checkpoint={"dir": str(checkpoints)})
    result = doctor(str(spec), cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    lines = result.stdout.splitlines()
    assert "every task runs on this machine: no links between hosts to measure" in lines
    host = next(line for line in lines if line.startswith("localhost "))
    assert "GiB" in host and host.endswith("ok")
    storage = next(line for line in lines if str(checkpoints) in line)
    assert "B/s (64.0 MiB, fsync'd)" in storage and storage.endswith("ok")
    assert lines[-1].startswith("doctor: 1 host(s) measured in ")
    assert not (tmp_path / "not-yet").exists()  # created for the test, removed after it


def test_json_gives_the_same_figures_to_machines(tmp_path: Path) -> None:
    (tmp_path / "ckpt").mkdir()
    spec = spec_file(tmp_path, checkpoint={"dir": str(tmp_path / "ckpt")})
    result = doctor("--json", str(spec), cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["ok"] is True and data["links"] == [] and data["problems"] == []
    (host,) = data["hosts"]
    assert host["host"] == "localhost" and host["cpus"] >= 1
    assert abs(host["clock_offset_ms"]) < 100
    (storage,) = data["storage"]
    assert storage["write_mb_s"] > 0 and storage["read_mb_s"] > 0
    assert list((tmp_path / "ckpt").iterdir()) == []  # the test file went; the dir stays


def test_a_host_whose_python_cannot_run_is_one_line_and_exit_1(tmp_path: Path) -> None:
    spec = spec_file(tmp_path, python="/nonexistent/python3")
    result = doctor(str(spec), cwd=tmp_path)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "localhost: python not found: /nonexistent/python3" in result.stdout.splitlines()
    assert "Traceback" not in result.stdout + result.stderr
    assert result.stdout.splitlines()[-1].startswith(
        "doctor: 1 of 1 host(s) could not be measured (localhost)")
