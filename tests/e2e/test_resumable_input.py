"""Real TensorFlow MWMS with tf_keras ``fit`` (``worker.examples.digits_keras``, 2 workers,
``--deterministic``, a backup every 7 batches of 30-batch epochs): the input comes from
``worker.data.resumable_input`` positioned at the backup's step, so a worker SIGKILLed mid-epoch
makes the job resume on the exact next batch and end with the very weights of an uninterrupted
run. (The custom loop's side, the same helper positioned by ``TrainingCheckpoint.restore``, is
what ``test_digits.py`` and ``test_amp_accumulate.py`` check with their hashes.)

An elastic job resumed with another worker count trains on the same global batches: that part
runs the helper in this process, handing it the ``InputContext`` MWMS gives each worker (seconds).
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.e2e.tfjobs import TEST_TIMEOUT_S, finished, requires_tf, signal_task, tf_job, wait_for_file
from tests.support.jobs import REPO, write_spec
from worker.data import resumable_input

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


# --- elastic: the same global batches at every worker count (in this process, no job) -----------

GLOBAL_BATCH = 10  # 3 and 4 replicas do not divide it: the default splits it as evenly as can be
STEPS = 6
RESUME_AT = 2


class OneWorkerOf:
    """The strategy as one worker of ``workers`` (each with ``local`` replicas) sees it:
    ``distribute_datasets_from_function`` calls the input function with this worker's
    ``InputContext``, as MWMS does, and returns that worker's dataset."""

    def __init__(self, worker: int, workers: int, local: int = 1) -> None:
        self.worker, self.workers, self.local = worker, workers, local

    def distribute_datasets_from_function(self, dataset_fn: Any) -> Any:
        import tensorflow as tf

        return dataset_fn(tf.distribute.InputContext(
            num_input_pipelines=self.workers, input_pipeline_id=self.worker,
            num_replicas_in_sync=self.workers * self.local))


def seen_by_job(workers: int, local: int, position: int, order: np.ndarray) -> list[list[int]]:
    """The global batches a job of ``workers`` x ``local`` replicas trains on from ``position``:
    for every step, every replica's slice (after ``per_replica``) in replica order."""
    import tensorflow as tf

    examples = tf.range(order.size, dtype=tf.int64) + 1000  # per_replica must run: +1000
    per_worker = [
        [e.tolist() for e in resumable_input(
            OneWorkerOf(w, workers, local), lambda: tf.data.Dataset.from_tensor_slices(order),
            global_batch_size=GLOBAL_BATCH, position=position,
            per_replica=lambda idx: tf.gather(examples, idx)).as_numpy_iterator()]
        for w in range(workers)]
    steps = len(order) - position
    assert all(len(elements) == steps * local for elements in per_worker)
    return [[x for elements in per_worker for r in range(local) for x in elements[n * local + r]]
            for n in range(steps)]


def test_a_job_resumed_with_another_worker_count_trains_on_the_same_global_batches() -> None:
    """Run in a process of its own: TensorFlow imported here would stay in this test worker
    (tests elsewhere check that reading a run needs no TensorFlow)."""
    done = subprocess.run(
        [sys.executable, "-c", "from tests.e2e.test_resumable_input import "
         "check_global_batches_across_sizes as check; check()"],
        cwd=REPO, capture_output=True, text=True, timeout=240, check=False,
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"})
    assert done.returncode == 0, done.stderr[-3000:]


def check_global_batches_across_sizes() -> None:
    import tensorflow as tf

    order = np.random.default_rng(7).permutation(STEPS * GLOBAL_BATCH).reshape(STEPS, GLOBAL_BATCH)
    uninterrupted = seen_by_job(2, 1, 0, order)
    assert uninterrupted == (order + 1000).tolist()
    for workers, local in [(1, 1), (3, 1), (4, 1), (2, 2)]:
        assert seen_by_job(workers, local, RESUME_AT, order) == uninterrupted[RESUME_AT:], \
            (workers, local)
    # One worker under TF's own (default) strategy: whole global batches, the same ones.
    alone = resumable_input(tf.distribute.get_strategy(),
                            lambda: tf.data.Dataset.from_tensor_slices(order + 1000),
                            global_batch_size=GLOBAL_BATCH, position=RESUME_AT)
    assert [b.tolist() for b in alone.as_numpy_iterator()] == uninterrupted[RESUME_AT:]
    with pytest.raises(ValueError, match=r"^a global batch of 10 does not divide among the 3 "):
        resumable_input(OneWorkerOf(0, 3), lambda: tf.data.Dataset.from_tensor_slices(order),
                        global_batch_size=GLOBAL_BATCH, position=RESUME_AT,
                        require_divisible=True)
