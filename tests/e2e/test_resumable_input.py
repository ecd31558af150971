"""Real TensorFlow MWMS with tf_keras ``fit`` (``worker.examples.digits_keras``, 2 workers,
``--deterministic``, a backup every 7 batches of 30-batch epochs): the input comes from
``worker.data.resumable_input`` positioned at the backup's step, so a worker SIGKILLed mid-epoch
makes the job resume on the exact next batch and end with the very weights of an uninterrupted
run. (The custom loop's side, the same helper positioned by ``TrainingCheckpoint.restore``, is
what ``test_digits.py`` and ``test_amp_accumulate.py`` check with their hashes.)
"""

from __future__ import annotations

import re
import signal
from pathlib import Path

import pytest

from tests.e2e.tfjobs import TEST_TIMEOUT_S, finished, requires_tf, signal_task, tf_job, wait_for_file
from tests.support.jobs import REPO, write_spec

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(TEST_TIMEOUT_S), requires_tf]

EPOCHS = 4
STEPS_PER_EPOCH = 30
BACKUP_EVERY = 7  # no backup falls on an epoch boundary before step 210
_FROM_EPOCH = re.compile(r"^\[keras \S+\] training from epoch (\d+) \(step (-?\d+)\)$",
                         re.MULTILINE)


def keras_spec(tmp_path: Path) -> Path:
    return write_spec(tmp_path, {
        "name": "digits-keras-exact",
        "entrypoint": {"module": "worker.examples.digits_keras",
                       "args": ["--epochs", str(EPOCHS), "--steps-per-epoch", str(STEPS_PER_EPOCH),
                                "--backup-every", str(BACKUP_EVERY), "--deterministic"]},
        "workdir": str(REPO),
        "env": {"TF_USE_LEGACY_KERAS": "1", "TF_CPP_MIN_LOG_LEVEL": "2"},
        "checkpoint": {"dir": str(tmp_path / "unused")},  # --checkpoint-dir overrides it
        "tasks": [{"type": "worker", "host": "localhost", "count": 2}],
        "restart": {"max_restarts": 2, "backoff_s": 0.5},
        "health": {"grace_period_s": 10},
    })


def test_keras_fit_killed_mid_epoch_ends_with_the_weights_of_an_uninterrupted_run(
        tmp_path: Path) -> None:
    spec = keras_spec(tmp_path)
    (tmp_path / "reference").mkdir()
    reference_ckpt = tmp_path / "reference" / "ckpt"
    with tf_job(tmp_path / "reference", ["run", str(spec)], reference_ckpt) as job:
        pass
    reference = finished(job, reference_ckpt)
    assert reference.exit_code == 0, reference.stderr

    (tmp_path / "killed").mkdir()
    ckpt = tmp_path / "killed" / "ckpt"
    with tf_job(tmp_path / "killed", ["run", str(spec)], ckpt) as job:
        wait_for_file(job, ckpt / "chief" / "checkpoint")  # the first backup is complete
        signal_task(job, "worker:1", signal.SIGKILL)
    run = finished(job, ckpt)
    assert run.exit_code == 0, run.stderr
    found = next(e for e in run.events if e["event"] == "checkpoint_found")
    step = found["step"]
    assert step % BACKUP_EVERY == 0 and step % STEPS_PER_EPOCH != 0, found  # mid-epoch
    assert 0 < step < EPOCHS * STEPS_PER_EPOCH
    resumed = {task: _FROM_EPOCH.findall(text) for task, text in run.logs(1).items()}
    assert {task: epochs[0][0] for task, epochs in resumed.items()} == {
        "worker:0": str(step // STEPS_PER_EPOCH), "worker:1": str(step // STEPS_PER_EPOCH)}
    assert run.first_steps(1) == {step + 1}  # the very next batch
    assert run.events[-1]["event"] == "job_succeeded"
    assert run.final_hash() == reference.final_hash()
