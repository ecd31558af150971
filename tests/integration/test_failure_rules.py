"""Failure rules with real processes (``tfcluster run``, the local engine, tiny scripts and the fake
trainer): a start-up error no retry can fix fails the job at once, a ``restart_uncounted`` rule
is honoured, and the "do not restart" exit code stops the job."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.support.jobs import fake_spec, read_events, running, wait_until_gone, write_spec

pytestmark = pytest.mark.timeout(90)

#: "well under a second" from the task's exit to the job's end
FAIL_FAST_S = 1.0
START_UP_REASON = "at start-up (attempt 0, before any step): retrying cannot fix it"


def write(tmp_path: Path, name: str, text: str) -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def run_job(tmp_path: Path, spec: dict[str, Any]) -> tuple[int, list[dict[str, Any]], str]:
    """Run ``spec`` to its end; its exit code, events and stderr. Nothing may be left running."""
    run_dir = tmp_path / "run"
    with running(["run", str(write_spec(tmp_path, spec))], run_dir, tmp_path) as job:
        code = job.wait(60)
        assert wait_until_gone(job.mark, 5) == []
        stderr = job.stderr
    return code, read_events(run_dir), stderr


def of(events: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [e for e in events if e["event"] == kind]


def start_up_cases(tmp_path: Path) -> dict[str, tuple[dict[str, Any], str]]:
    """Each way a job cannot start: (entrypoint, what the reason names)."""
    return {
        "module-not-found": ({"script": write(tmp_path, "imports.py", "import nosuchmodule_xyz\n")},
                             "ModuleNotFoundError (No module named 'nosuchmodule_xyz')"),
        "syntax-error": ({"script": write(tmp_path, "syntax.py", "def step(:\n    pass\n")},
                         "SyntaxError (invalid syntax)"),
        "missing-script": ({"script": str(tmp_path / "trian.py")}, "a missing entrypoint file"),
        "bad-argument": ({"script": str(Path(__file__).parents[1] / "support" / "fake_trainer.py"),
                          "args": ["--stpes", "5"]},
                         "a bad command-line argument (fake_trainer.py: error: unrecognized "
                         "arguments: --stpes 5)"),
    }


def test_a_missing_script_on_this_machine_is_refused_before_anything_starts(
        tmp_path: Path) -> None:
    entrypoint, _ = start_up_cases(tmp_path)["missing-script"]
    spec = fake_spec("startup-missing-script", entrypoint=entrypoint,
                     tasks=[{"type": "worker", "count": 2}],
                     restart={"max_restarts": 5, "backoff_s": 2.0})
    code, events, stderr = run_job(tmp_path, spec)
    assert code != 0 and not of(events, "attempt_started")
    assert "trian.py" in stderr and "nothing was launched" in stderr, stderr


@pytest.mark.parametrize("case", ["module-not-found", "syntax-error", "bad-argument"])
def test_a_start_up_error_fails_the_job_at_once(tmp_path: Path, case: str) -> None:
    entrypoint, named = start_up_cases(tmp_path)[case]
    spec = fake_spec(f"startup-{case}", entrypoint=entrypoint, tasks=[{"type": "worker",
                                                                      "count": 2}],
                     restart={"max_restarts": 5, "backoff_s": 2.0})
    code, events, stderr = run_job(tmp_path, spec)

    assert code in (1, 2)  # the task's own exit code: 1 for an exception, 2 for argparse
    assert len(of(events, "attempt_started")) == 1 and not of(events, "job_restarting")
    failed, = of(events, "job_failed")
    assert failed["reason"].startswith(named) and START_UP_REASON in failed["reason"], \
        failed["reason"]
    exited = min(e["died_at"] for e in of(events, "task_failed"))
    assert failed["ts"] - exited < FAIL_FAST_S
    lines = [line for line in stderr.splitlines() if "retrying cannot fix it" in line]
    assert len(lines) == 1 and named in lines[0], stderr
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["attempts"][0]["rule"]["rule"] == "built-in"


def test_a_rule_restarts_exit_75_without_counting_it(tmp_path: Path) -> None:
    spec = fake_spec("uncounted", args=["--steps", "12", "--step-time", "0.02", "--fail-task",
                                        "worker:0", "--fail-at-step", "3", "--fail-mode",
                                        "exit:75", "--fail-attempts", "0,1"],
                     restart={"max_restarts": 0, "backoff_s": 0.1,
                              "rules": [{"match": {"exit_codes": [75]},
                                         "action": "restart_uncounted"}]})
    code, events, stderr = run_job(tmp_path, spec)

    assert code == 0, stderr
    restarts = of(events, "job_restarting")
    assert [r["counts_against_budget"] for r in restarts] == [False, False]
    assert [r["backoff_s"] for r in restarts] == [0.0, 0.1]  # the first at once, then backoff
    assert all(r["reason"].startswith("restart.rules[0] (exit 75): restart, not counted")
               for r in restarts)
    assert "restart.rules[0] (exit 75): restart, not counted" in stderr
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert [a["counted_against_budget"] for a in summary["attempts"]] == [False, False, False]


def test_the_do_not_restart_exit_code_stops_the_job(tmp_path: Path) -> None:
    script = write(tmp_path, "stop.py", "import os, sys\n"
                   "sys.exit(int(os.environ['TFCLUSTER_DO_NOT_RESTART_EXIT_CODE']))\n")
    spec = fake_spec("stop", entrypoint={"script": script}, tasks=[{"type": "worker"}],
                     restart={"max_restarts": 5, "backoff_s": 2.0})
    code, events, stderr = run_job(tmp_path, spec)

    assert code == 78, stderr
    assert len(of(events, "attempt_started")) == 1 and not of(events, "job_restarting")
    failed, = of(events, "job_failed")
    assert "the task exited 78, the exit code with which a task asks not to be restarted " \
           "(TFCLUSTER_DO_NOT_RESTART_EXIT_CODE): not restarted" in failed["reason"]
    assert failed["ts"] - of(events, "task_failed")[0]["died_at"] < FAIL_FAST_S


def test_a_parameter_server_worker_that_cannot_import_is_not_restarted(tmp_path: Path) -> None:
    chief = str(Path(__file__).parents[1] / "support" / "fake_trainer.py")
    server = {"script": write(tmp_path, "server.py", "import nosuchmodule_xyz\n")}
    spec = fake_spec("ps-import", entrypoint={"script": chief, "args": ["--steps", "400"]},
                     strategy="parameter_server",
                     tasks=[{"type": "chief"}, {"type": "worker", "count": 2, "entrypoint": server},
                            {"type": "ps", "entrypoint": server}],
                     checkpoint={"dir": str(tmp_path / "ckpt")},
                     restart={"max_restarts": 2, "max_task_restarts": 10, "backoff_s": 0.2})
    code, events, _ = run_job(tmp_path, spec)

    assert code == 1
    assert not of(events, "task_restarted")
    failed, = of(events, "job_failed")
    assert "ModuleNotFoundError (No module named 'nosuchmodule_xyz') at start-up (before any " \
           "step)" in failed["reason"]
