"""Real TensorFlow MWMS with tf_keras ``model.fit`` (``worker.examples.digits_keras``): a worker
SIGKILLed after the first epoch's backup; the restarted attempt resumes from Keras
``BackupAndRestore``'s ``<dir>/chief/`` backup, which tfcluster finds and leaves alone."""

from __future__ import annotations

import re
import signal
from pathlib import Path

import pytest

from tests.e2e.tfjobs import (
    TEST_TIMEOUT_S,
    finished,
    requires_tf,
    signal_task,
    tf_job,
    wait_for_file,
)
from tests.support.jobs import REPO, write_spec

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(TEST_TIMEOUT_S), requires_tf]

EPOCHS = 8
STEPS_PER_EPOCH = 40
_FROM_EPOCH = re.compile(r"^\[keras \S+\] training from epoch (\d+) \(step (\d+)\)$", re.MULTILINE)


def keras_spec(tmp_path: Path) -> Path:
    return write_spec(tmp_path, {
        "name": "digits-keras",
        "entrypoint": {"module": "worker.examples.digits_keras",
                       "args": ["--epochs", str(EPOCHS),
                                "--steps-per-epoch", str(STEPS_PER_EPOCH)]},
        "workdir": str(REPO),
        "env": {"TF_USE_LEGACY_KERAS": "1", "TF_CPP_MIN_LOG_LEVEL": "2"},
        "checkpoint": {"dir": str(tmp_path / "unused")},  # --checkpoint-dir overrides it
        "tasks": [{"type": "worker", "host": "localhost", "count": 2}],
        "restart": {"max_restarts": 2, "backoff_s": 0.5},
        "health": {"grace_period_s": 10},
    })


def test_a_sigkilled_keras_fit_worker_resumes_from_the_chiefs_backup(tmp_path: Path) -> None:
    ckpt = tmp_path / "ckpt"
    chief = ckpt / "chief"
    with tf_job(tmp_path, ["run", str(keras_spec(tmp_path))], ckpt) as job:
        wait_for_file(job, chief / "checkpoint")  # the first epoch is backed up
        signal_task(job, "worker:1", signal.SIGKILL)
    run = finished(job, ckpt)
    assert run.exit_code == 0, run.stderr
    events = run.events
    failed = next(e for e in events if e["event"] == "task_failed")
    assert (failed["task"], failed["signal"]) == ("worker:1", "SIGKILL")
    found = next(e for e in events if e["event"] == "checkpoint_found")
    step = found["step"]  # backups are numbered by training step
    assert found["checkpoint"] == str(chief / f"ckpt-{step}")
    assert 0 < step < EPOCHS * STEPS_PER_EPOCH and step % STEPS_PER_EPOCH == 0
    resumed = {task: _FROM_EPOCH.findall(text) for task, text in run.logs(1).items()}
    epoch = str(step // STEPS_PER_EPOCH)
    assert resumed == {"worker:0": [(epoch, str(step))], "worker:1": [(epoch, str(step))]}
    assert run.first_steps(1) == {step + 1}
    assert events[-1]["event"] == "job_succeeded"
    accuracies = run.accuracies()
    assert len(accuracies) == 2 and min(accuracies.values()) > 0.9, accuracies
    final = EPOCHS * STEPS_PER_EPOCH
    assert f'model_checkpoint_path: "ckpt-{final}"' in (chief / "checkpoint").read_text()
    assert (chief / f"ckpt-{final}.index").stat().st_size > 0
    assert (chief / f"ckpt-{final}.data-00000-of-00001").stat().st_size > 0
    assert {p.name for p in ckpt.iterdir()} == {"chief"}  # no workertemp_* left
