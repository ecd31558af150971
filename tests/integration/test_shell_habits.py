"""Shell habits, through the real CLI: ``tfcluster plan ... | head -1`` exits 0 (for every verb that
prints), ``plan`` shows the ports that ``run`` then takes, the same at every call; ``status`` and
``logs`` without a run directory read the latest run and say which; ``logs chief`` is a task."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.support.jobs import REPO

#: Each task prints its TF_CONFIG and exits 0.
PRINT_TF_CONFIG = "import os; print('TF_CONFIG=' + os.environ['TF_CONFIG'])"


def tfcluster(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "launcher", *args], capture_output=True,
                          text=True, cwd=cwd, timeout=60, check=False,
                          env={**os.environ, "NO_COLOR": "1"})


def write_spec(directory: Path) -> Path:
    spec = {"name": "habits", "entrypoint": {"command": [sys.executable, "-c", PRINT_TF_CONFIG]},
            "tasks": [{"type": "chief"}, {"type": "worker", "count": 1}],
            "restart": {"max_restarts": 0}}
    path = directory / "habits.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


def closed_reader(*args: str, cwd: Path) -> subprocess.CompletedProcess[bytes]:
    """``tfcluster ARGS | head -0``: the reader has gone before tfcluster writes."""
    read, write = os.pipe()
    os.close(read)  # long before the child's interpreter has started
    try:
        return subprocess.run([sys.executable, "-m", "launcher", *args], stdout=write,
                              stderr=subprocess.PIPE, cwd=cwd, timeout=60, check=False)
    finally:
        os.close(write)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("argv", [
    ["plan", "cluster_specs/local-2workers.yaml"],
    ["plan", "--json", "cluster_specs/local-2workers.yaml"],
    ["validate", "cluster_specs/local-2workers.yaml"],
    ["completion", "bash"],
    ["--help"],
    ["run", "--help"],
])
def test_a_reader_that_goes_away_is_no_error(argv: list[str]) -> None:
    result = closed_reader(*argv, cwd=REPO)
    assert (result.returncode, result.stderr) == (0, b"")


@pytest.mark.timeout(90)
def test_plan_shows_the_ports_run_takes_and_the_latest_run_is_read_by_default(
        tmp_path: Path) -> None:
    spec = write_spec(tmp_path)
    plans = [json.loads(tfcluster("plan", "--json", str(spec), cwd=tmp_path).stdout)
             for _ in range(2)]
    assert plans[0]["cluster"] == plans[1]["cluster"]  # the same at every call

    run = tfcluster("run", str(spec), cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    (run_dir,) = (tmp_path / "runs").iterdir()
    started = [line for line in (run_dir / "attempt-0" / "chief-0.log").read_text().splitlines()
               if line.startswith("TF_CONFIG=")]
    assert json.loads(started[0].removeprefix("TF_CONFIG="))["cluster"] == plans[0]["cluster"]

    status = tfcluster("status", cwd=tmp_path)
    assert status.returncode == 0, status.stderr
    assert status.stderr == f"tfcluster: the latest run: runs/{run_dir.name} (give RUN_DIR for " \
                            "another)\n"
    assert "succeeded" in status.stdout.splitlines()[0]

    for argv in (["logs", "chief"], ["logs", f"runs/{run_dir.name}", "chief"],
                 ["logs", f"runs/{run_dir.name}", "chief:0"], ["logs", "worker-0"]):
        logs = tfcluster(*argv, cwd=tmp_path)
        assert logs.returncode == 0, (argv, logs.stderr)
        assert "TF_CONFIG=" in logs.stdout
    chief = tfcluster("logs", f"runs/{run_dir.name}", "chief", cwd=tmp_path).stdout
    assert '"type":"chief"' in chief and '"type":"worker"' not in chief
