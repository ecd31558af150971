"""``tfcluster run --resume RUN_DIR``: every run directory or argument that cannot be resumed gets
one line (no traceback) and the right exit code; nothing here starts a job."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any

import pytest

from launcher.cli.main import main
from launcher.job.resume import open_resume
from launcher.run.directory import RunDir, RunDirLive
from launcher.run.stored_spec import stored_spec
from launcher.spec.errors import SpecError
from launcher.spec.loading import spec_from_dict
from tests.support.jobs import fake_spec, write_spec


def spec_data(tmp_path: Path, **fields: Any) -> dict[str, Any]:
    fields.setdefault("checkpoint", {"dir": str(tmp_path / "ckpt")})
    return fake_spec("job", args=["--steps", "5"], **fields)


def make_run(tmp_path: Path, events: list[dict[str, Any]], **fields: Any) -> Path:
    """A run directory as a coordinator leaves it: spec.json and ``events``, unlocked."""
    run = RunDir(tmp_path / "run",
                 stored_spec=stored_spec(spec_from_dict(spec_data(tmp_path, **fields)),
                                         str(tmp_path)))
    run.create()
    run.release()
    with run.events.open("a") as handle:
        for event in events:
            handle.write(json.dumps({"ts": 1.0, **event}) + "\n")
    return run.path


STARTED: list[dict[str, Any]] = [
    {"event": "job_started", "job": "job", "run_dir": "x", "tasks": [], "hosts": []},
    {"event": "attempt_started", "attempt": 0, "resume_step": None, "resume_checkpoint": None,
     "ports": {}}]


def run_cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, list[str]]:
    code = main(["run", *argv])
    err = capsys.readouterr().err
    return code, err.splitlines()


def one_line(lines: list[str]) -> str:
    assert len(lines) == 1, lines
    assert "Traceback" not in lines[0]
    return lines[0]


def test_run_needs_a_spec_or_resume(capsys: pytest.CaptureFixture[str]) -> None:
    code, lines = run_cli(capsys)
    assert code == 2
    assert "give a SPEC, or --resume RUN_DIR" in one_line(lines)


def test_a_missing_directory(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, lines = run_cli(capsys, "--resume", str(tmp_path / "nope"))
    assert code == 1
    assert "does not exist" in one_line(lines)


def test_a_directory_that_is_not_a_run(tmp_path: Path,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    code, lines = run_cli(capsys, "--resume", str(tmp_path))
    assert code == 1
    assert "is not a tfcluster run (no events.jsonl)" in one_line(lines)


def test_a_run_without_a_stored_spec(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = make_run(tmp_path, STARTED)
    (run / "spec.json").unlink()
    code, lines = run_cli(capsys, "--resume", str(run))
    assert code == 1
    assert "has no stored spec (spec.json" in one_line(lines)


def test_a_stored_spec_that_is_not_one(tmp_path: Path,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    run = make_run(tmp_path, STARTED)
    (run / "spec.json").write_text("{not json")
    code, lines = run_cli(capsys, "--resume", str(run))
    assert code == 1
    assert "spec.json is not valid JSON" in one_line(lines)


def test_a_run_whose_coordinator_is_alive(tmp_path: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    run = make_run(tmp_path, STARTED)
    live = RunDir(run, resuming=True)
    live.create()  # this process now holds the run directory's lock, as a live coordinator does
    try:
        code, lines = run_cli(capsys, "--resume", str(run))
    finally:
        live.release()
    assert code == 1
    assert f"its coordinator (pid {os.getpid()}) is still running" in one_line(lines)
    assert open_resume(run).start.resumed  # released: resumable again


def test_a_run_that_already_succeeded_exits_0(tmp_path: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    run = make_run(tmp_path, [*STARTED, {"event": "job_succeeded", "job": "job", "attempts": 1}])
    before = (run / "events.jsonl").read_text()
    code, lines = run_cli(capsys, "--resume", str(run))
    assert code == 0
    assert "job job already succeeded (1 attempt(s)); nothing to resume" in one_line(lines)
    assert (run / "events.jsonl").read_text() == before


def test_a_job_that_failed_on_its_own_is_refused(tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    run = make_run(tmp_path, [*STARTED, {
        "event": "job_failed", "job": "job", "exit_code": 1, "attempts": 1, "root_cause": None,
        "reason": "a task failed and restarts are off (restart.max_restarts = 0)"}])
    code, lines = run_cli(capsys, "--resume", str(run))
    assert code == 1
    line = one_line(lines)
    assert "job job failed (attempt 0: a task failed and restarts are off" in line
    assert "only a job whose coordinator died or was stopped can be resumed" in line


def test_a_spec_that_differs_from_the_stored_one(tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    run = make_run(tmp_path, STARTED)
    other = write_spec(tmp_path, {**spec_data(tmp_path), "restart": {"max_restarts": 5}})
    code, lines = run_cli(capsys, str(other), "--resume", str(run))
    assert code == 2
    assert "the SPEC given differs from the run's stored spec in restart" in one_line(lines)


def test_the_same_spec_and_flags_are_accepted(tmp_path: Path) -> None:
    run = make_run(tmp_path, STARTED)
    same = spec_from_dict(spec_data(tmp_path))
    resumption = open_resume(run, given=same, checkpoint_dir=str(tmp_path / "ckpt"),
                             run_dir_flag=str(run))
    assert resumption.spec == same and resumption.done is None
    assert resumption.start.first_attempt == 1
    assert resumption.base_dir == str(tmp_path)  # relative paths resolve as at the first start


@pytest.mark.parametrize(("flag", "expected"), [
    ("--checkpoint-dir", "is not the run's checkpoint directory"),
    ("--run-dir", "names another directory"),
])
def test_flags_that_contradict_the_stored_run(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                              flag: str, expected: str) -> None:
    run = make_run(tmp_path, STARTED)
    code, lines = run_cli(capsys, "--resume", str(run), flag, str(tmp_path / "elsewhere"))
    assert code == 2
    assert expected in one_line(lines)


def test_the_stored_spec_is_private_and_validated_back(tmp_path: Path) -> None:
    run = make_run(tmp_path, STARTED, env={"API_TOKEN": "s3cret"})
    assert stat.S_IMODE((run / "spec.json").stat().st_mode) == 0o600
    assert open_resume(run).spec.env == {"API_TOKEN": "s3cret"}
    record = json.loads((run / "spec.json").read_text())
    record["spec"]["tasks"] = []
    (run / "spec.json").write_text(json.dumps(record))
    with pytest.raises(SpecError, match=r"spec\.json"):
        open_resume(run)


def test_a_fresh_run_dir_is_locked_while_its_coordinator_lives(tmp_path: Path) -> None:
    run = RunDir(tmp_path / "run", stored_spec={"format": 1})
    run.create()
    (run.events).write_text('{"ts": 1, "event": "job_started"}\n')
    with pytest.raises(RunDirLive, match="is still running"):
        RunDir(run.path, resuming=True).check()
    run.release()
    RunDir(run.path, resuming=True).check()


def test_the_stored_spec_keeps_unset_fields_unset(tmp_path: Path) -> None:
    """A deadline the spec left to its default is still a default after ``--resume`` (the
    start-up deadline is enforced only when set, or once an attempt reported steps)."""
    run = make_run(tmp_path, STARTED, health={"hang_timeout_s": 30})
    health = open_resume(run).spec.health
    assert health.hang_timeout_s == 30
    assert "hang_timeout_s" in health.model_fields_set
    assert "startup_timeout_s" not in health.model_fields_set
