"""A calm console with real processes (no TensorFlow): worker:1 crashes, the survivors spill a
traceback when tfcluster TERMs them, and every task prints TF-like start-up noise. The console
shows the root cause, then one line per survivor; the survivors' tracebacks and the noise are in
the task logs only, and ``--verbose`` shows everything."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.support.jobs import Job, running, wait_until_gone, write_spec
from tests.support.waiting import wait_until

pytestmark = pytest.mark.timeout(90)

SCRIPT = """\
import os, signal, sys, time
task = os.environ["TFCLUSTER_TASK"]
print("WARNING: All log messages before absl::InitializeLog() is called are written to STDERR",
      file=sys.stderr, flush=True)
print("I0000 00:00:1796144568.229799   16633 cudart_stub.cc:31] Could not find cuda drivers on "
      "your machine, GPU will not be used.", file=sys.stderr, flush=True)

def on_term(signum, frame):
    for line in ["Traceback (most recent call last):", '  File "train.py", line 1, in <module>',
                 "UnavailableError: Collective ops is aborted by: Connection reset by peer"]:
        print(line, file=sys.stderr, flush=True)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    os.kill(os.getpid(), signal.SIGTERM)

signal.signal(signal.SIGTERM, on_term)
# on stderr after the noise: one pipe, so the console has taken the noise by the time it shows
# this line (on stdout the two pipes' order at the console is not fixed: a survivor's noise
# could come after its "ready", still held when the crash mutes it, and be counted unshown)
print(task, "ready", file=sys.stderr, flush=True)
if task == "worker:1":
    # the test creates GO once the console has shown the others' "ready" (past its hold)
    deadline = time.monotonic() + 60
    while not os.path.exists(sys.argv[1]) and time.monotonic() < deadline:
        time.sleep(0.02)
    print("worker:1 crashes now", flush=True)
    sys.exit(3)
while True:
    time.sleep(0.05)
"""


def spec(tmp_path: Path) -> Path:
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    return write_spec(tmp_path, {
        "name": "calm", "entrypoint": {"script": str(script), "args": [str(tmp_path / "GO")]},
        "tasks": [{"type": "worker", "count": 3}],
        "restart": {"max_restarts": 0}, "health": {"grace_period_s": 3}})


def crash_when_shown(job: Job, tmp_path: Path, lines: list[str]) -> None:
    """Let worker:1 crash once the console has shown each of ``lines`` (the survivors are ready:
    their SIGTERM handlers are in place)."""
    wait_until(lambda: all(line in job.stdout for line in lines), 60, f"the console shows {lines}")
    (tmp_path / "GO").touch()


def test_the_survivors_of_a_crash_are_one_line_each_after_the_root_cause(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    with running(["run", str(spec(tmp_path))], run_dir, tmp_path) as job:
        crash_when_shown(job, tmp_path, ["[worker:0] worker:0 ready", "[worker:2] worker:2 ready"])
        assert job.wait(60) == 3, job.stderr
        assert wait_until_gone(job.mark, 10) == []
    assert "Traceback" not in job.stdout and "absl::InitializeLog" not in job.stdout
    assert "cuda drivers" not in job.stdout
    assert "[worker:1] worker:1 crashes now" in job.stdout
    err = job.stderr.splitlines()
    cause = next(i for i, line in enumerate(err) if "Root cause" in line)
    assert "worker:1" in err[cause] and "exited with code 3" in err[cause]
    survivors = [line for line in err[cause:] if re.match(r"tfcluster: worker:[02] ", line)]
    assert len(survivors) == 2, job.stderr
    for task, line in zip(("worker:0", "worker:2"), survivors, strict=True):
        log = run_dir / "attempt-0" / f"{task.replace(':', '-')}.log"
        assert line == (f"tfcluster: {task} stopped by tfcluster (SIGTERM); 3 more line(s) in "
                        f"{log}")
        text = log.read_text()
        assert "Traceback (most recent call last):" in text and "absl::InitializeLog" in text
    assert err[-2].startswith("tfcluster: 6 line(s) of known TensorFlow noise not shown")
    assert err[-1].startswith("tfcluster: job calm failed")


def test_verbose_shows_every_line(tmp_path: Path) -> None:
    with running(["run", str(spec(tmp_path)), "--verbose"], tmp_path / "run", tmp_path) as job:
        crash_when_shown(job, tmp_path, ["worker:0 ready", "worker:2 ready"])
        assert job.wait(60) == 3, job.stderr
        assert wait_until_gone(job.mark, 10) == []
    assert job.stdout.count("absl::InitializeLog") == 3
    assert job.stdout.count("Traceback (most recent call last):") == 2
    assert not re.search(r"tfcluster: worker:[02] stopped", job.stderr)
