"""The batch script ``tfcluster submit`` writes, run by bash with stand-ins for tfcluster and
Slurm's commands: Slurm's stop request (USR1) requeues the job, unless tfcluster ended with the
"do not restart" exit code."""

from __future__ import annotations

import os
import stat
import subprocess
from pathlib import Path

import pytest

from launcher.backends.slurm.sbatch import BatchRequest, batch_script
from worker.wire.env import DO_NOT_RESTART_EXIT_CODE

pytestmark = pytest.mark.timeout(60)

#: Stands in for ``python -m launcher run ...``: once the batch shell waits for it, asks the shell
#: to stop (as Slurm's ``--signal=B:USR1`` does before the time limit), and once the shell has
#: forwarded the signal and waits for it again (tfcluster stops its tasks first), exits with
#: ``$STUB_RC``. The shell's state is read from /proc (``wchan``), each wait with a deadline.
TFCLUSTER_STUB = """#!/bin/bash
stopping=0
trap 'stopping=1' USR1
deadline=$((SECONDS + 10))
shell_waits() { [ "$(cat /proc/$PPID/wchan 2>/dev/null)" = do_wait ]; }
until shell_waits; do [ "$SECONDS" -lt "$deadline" ] || exit 98; sleep 0.01; done
kill -USR1 "$PPID"
until [ "$stopping" = 1 ] && shell_waits; do [ "$SECONDS" -lt "$deadline" ] || exit 99; sleep 0.01; done
exit "$STUB_RC"
"""
#: Stands in for ``scontrol`` and ``sbatch``: records how it was called.
RECORDER = """#!/bin/bash
echo "$(basename "$0") $*" >> "$CALLS"
"""


def executable(path: Path, text: str) -> str:
    path.write_text(text)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return str(path)


def run_batch(tmp_path: Path, tfcluster_rc: int) -> tuple[int, list[str], str]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for command in ("scontrol", "sbatch"):
        executable(bin_dir / command, RECORDER)
    python = executable(tmp_path / "python", TFCLUSTER_STUB)
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    script = tmp_path / "job.sbatch"
    script.write_text(batch_script(BatchRequest(
        spec=str(tmp_path / "spec.yaml"), run_dir=str(run_dir), script=str(script),
        job_name="tfcluster-x", nodes=1, python=python, workdir=str(tmp_path))))
    calls = tmp_path / "calls"
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "CALLS": str(calls),
           "STUB_RC": str(tfcluster_rc), "SLURM_JOB_ID": "4242"}
    done = subprocess.run(["bash", str(script)], env=env, capture_output=True, text=True,
                          timeout=30, check=False)
    return done.returncode, calls.read_text().splitlines() if calls.exists() else [], done.stdout


def test_a_stop_request_requeues_the_job(tmp_path: Path) -> None:
    code, calls, _ = run_batch(tmp_path, 0)
    assert calls == ["scontrol requeue 4242"]
    assert code == 0


def test_the_do_not_restart_exit_code_is_never_requeued(tmp_path: Path) -> None:
    code, calls, out = run_batch(tmp_path, DO_NOT_RESTART_EXIT_CODE)
    assert calls == []
    assert code == DO_NOT_RESTART_EXIT_CODE
    assert f"a task exited {DO_NOT_RESTART_EXIT_CODE} (do not restart); not requeueing job 4242" \
        in out
