"""Issue 7 through the CLI, as a user meets it: hostile spec values and options end in one line per
problem and exit 2, never a traceback or a hang; ``plan`` shows no secret; a task that writes a
10 MB stderr line leaves a small root-cause block and summary, while its log keeps the output."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from launcher.run.failures import EVIDENCE_LINE_CHARS, EVIDENCE_STDERR_LINES, STORED_STDERR_CHARS
from launcher.spec.limits import MAX_TASKS
from tests.support.jobs import REPO, running, wait_until_gone

#: Longest a test waits for a CLI that must answer at once.
CLI_TIMEOUT_S = 60
TEN_MB = 10_000_000


def tfcluster(*args: str, cwd: Path = REPO) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "launcher", *args], capture_output=True,
                          text=True, cwd=cwd, timeout=CLI_TIMEOUT_S, check=False)


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "job.yaml"
    path.write_text("name: job\nentrypoint: {command: [\"true\"]}\n" + text)
    return path


BAD_SPECS = {
    "nul in env": ('env: {FOO: "a\\0b"}\ntasks: [{type: worker}]\n',
                   "env.FOO: must not contain a NUL byte"),
    "nul in workdir": ('workdir: "/tmp/\\0"\ntasks: [{type: worker}]\n',
                       "workdir: must not contain a NUL byte"),
    "huge count": ("tasks: [{type: worker, count: 100000000000000000000000}]\n",
                   f"tasks[0].count: must be at most {MAX_TASKS}"),
    "thousands of digits": (f"tasks: [{{type: worker, count: {'9' * 5000}}}]\n", "is too long"),
    "a year of backoff": ("restart: {backoff_s: 31536000}\ntasks: [{type: worker}]\n",
                          "restart.backoff_s: must be at most 604800 seconds"),
    "nan timeout": ("health: {hang_timeout_s: .nan}\ntasks: [{type: worker}]\n",
                    "health.hang_timeout_s: must be a finite number"),
}


@pytest.mark.parametrize(("text", "problem"), BAD_SPECS.values(), ids=BAD_SPECS.keys())
@pytest.mark.parametrize("verb", ["validate", "plan"])
def test_hostile_spec_values_are_one_line_and_exit_2(tmp_path: Path, verb: str, text: str,
                                                     problem: str) -> None:
    spec = write(tmp_path, text)
    result = tfcluster(verb, str(spec), cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith(f"{spec}: ") and problem in line


LOCAL_OPTIONS = {
    "-n 13000": (["-n", "13000"], f"-n must be between 1 and {MAX_TASKS} (a job has at most"),
    "-n huge": (["-n", "100000000000000000000000"], f"-n must be between 1 and {MAX_TASKS}"),
    "--hang-timeout nan": (["-n", "1", "--hang-timeout", "nan"], "must be a finite number"),
    "--grace-period inf": (["-n", "1", "--grace-period", "inf"], "must be a finite number"),
    "--startup-timeout 1e308": (["-n", "1", "--startup-timeout", "1e308"], "at most 604800"),
    "--max-restarts huge": (["-n", "1", "--max-restarts", "10" * 20], "must be at most 1000"),
    "--name": (["-n", "1", "--name", "Bad Name"], "name: must be 1-63 lowercase"),
    "-n 0": (["-n", "0"], f"-n must be between 1 and {MAX_TASKS}"),
}


@pytest.mark.parametrize(("options", "problem"), LOCAL_OPTIONS.values(), ids=LOCAL_OPTIONS.keys())
def test_hostile_local_options_are_one_line_and_start_nothing(tmp_path: Path, options: list[str],
                                                              problem: str) -> None:
    run_dir = tmp_path / "run"
    with running(["local", *options, "--", "python3", "-c", "pass"], run_dir, tmp_path) as job:
        code = job.wait(CLI_TIMEOUT_S)
        assert wait_until_gone(job.mark, 5) == []
    assert code == 2, job.stderr
    assert "Traceback" not in job.stderr
    (line,) = job.stderr.strip().splitlines()
    assert line.startswith("tfcluster local: ") and problem in line
    assert not run_dir.exists()


def test_plan_masks_secrets_in_env_urls_and_argv(tmp_path: Path) -> None:
    spec = write(tmp_path, "tasks: [{type: worker}]\n"
                 "env:\n  DATABASE_URL: postgres://user:pw-1a2b@host/db\n  GITHUB_PAT: ghp-3c4d\n"
                 "  MY_KEY: key-5e6f\n  SSH_PASSPHRASE: phrase-7a8b\n")
    spec.write_text(spec.read_text().replace(
        'entrypoint: {command: ["true"]}',
        'entrypoint: {command: ["true"], args: ["--db=postgres://u:pw-9c0d@h", "--password", '
        '"pw-1e2f"]}'))
    for extra in ((), ("--json",)):
        result = tfcluster("plan", *extra, str(spec), cwd=tmp_path)
        assert result.returncode == 0, result.stderr
        for secret in ("pw-1a2b", "ghp-3c4d", "key-5e6f", "phrase-7a8b", "pw-9c0d", "pw-1e2f"):
            assert secret not in result.stdout
        assert "postgres://user:***@host/db" in result.stdout
        assert "postgres://u:***@h" in result.stdout


LOUD_SCRIPT = f"""\
import sys
sys.stderr.write("BEGIN" + "x" * {TEN_MB} + "END\\n")
sys.stderr.flush()
sys.exit(1)
"""


@pytest.mark.timeout(120)
def test_a_10mb_stderr_line_leaves_a_small_report_and_summary(tmp_path: Path) -> None:
    script = tmp_path / "loud.py"
    script.write_text(LOUD_SCRIPT)
    run_dir = tmp_path / "run"
    with running(["local", "-n", "1", "--quiet", "--", str(script)], run_dir, tmp_path) as job:
        code = job.wait(90)
        assert wait_until_gone(job.mark, 10) == []
    assert code == 1, job.stderr
    console = job.stderr
    assert "Traceback" not in console
    block = console[console.index("Root cause"):].splitlines()
    evidence = [line for line in block if "  | " in line]
    assert 0 < len(evidence) <= EVIDENCE_STDERR_LINES
    assert all(len(line) < EVIDENCE_LINE_CHARS + 100 for line in evidence)
    assert "more characters, see the task log]" in console
    assert len(console) < 20_000

    summary_path = run_dir / "summary.json"
    assert summary_path.stat().st_size < 100_000
    cause = json.loads(summary_path.read_text())["root_cause"]
    assert sum(map(len, cause["stderr_tail"])) <= STORED_STDERR_CHARS + 200
    assert (run_dir / "events.jsonl").stat().st_size < 100_000

    # The task log keeps the output: today the agent relays a line that long in 64 KiB pieces
    # and, past its output budget, drops the rest with a notice saying how much.
    log = (run_dir / "attempt-0" / "worker-0.log").read_text()
    assert log.startswith("BEGIN")
    assert len(log) > 1024 * 1024
    assert "xEND" in log or "[tfcluster] dropped" in log


NARROW_RANGE_CLI = """\
import sys
import launcher.plan.ports as ports
ports.candidate_range = lambda: (int(sys.argv[1]), int(sys.argv[1]) + 1)  # two ports only
from launcher.cli.main import main
raise SystemExit(main(sys.argv[2:]))
"""


@pytest.mark.parametrize("verb", ["local", "plan"])
def test_running_out_of_ports_is_one_line_that_says_what_to_do(tmp_path: Path, verb: str) -> None:
    spec = write(tmp_path, "tasks: [{type: worker, count: 3}]\n")
    argv = (["local", "-n", "3", "--quiet", "--run-dir", str(tmp_path / "run"), "--", "python3",
             "-c", "pass"] if verb == "local" else ["plan", str(spec)])
    result = subprocess.run([sys.executable, "-c", NARROW_RANGE_CLI, "23456", *argv],
                            capture_output=True, text=True, cwd=REPO, timeout=CLI_TIMEOUT_S,
                            check=False, env={**os.environ, "TMPDIR": str(tmp_path)})
    assert result.returncode == 1, result.stderr
    assert "Traceback" not in result.stderr
    (line,) = [text for text in result.stderr.splitlines() if "could not find" in text]
    assert line.startswith("tfcluster: could not find 3 free port(s) in 23456-23457")
    assert "run at most 2 tasks with allocated ports on this host" in line
    assert "or give the tasks explicit ports in a spec" in line
