"""Real tf_keras ``fit`` under MWMS: ``worker.keras.callbacks()`` reports fit's logs, which
tfcluster keeps in metrics.jsonl and TensorBoard files (per batch ``loss``/``accuracy``, per epoch
``epoch_loss``/``epoch_accuracy``), per task, read back with TensorBoard's own reader."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.e2e.tfjobs import TEST_TIMEOUT_S, finished, requires_tf, tf_job
from tests.support.jobs import REPO, write_spec
from tests.support.tensorboard_files import scalars, tags

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(TEST_TIMEOUT_S), requires_tf]

EPOCHS = 2
STEPS_PER_EPOCH = 10


def test_keras_fit_logs_reach_metrics_jsonl_and_tensorboard(tmp_path: Path) -> None:
    spec = write_spec(tmp_path, {
        "name": "keras-metrics",
        "entrypoint": {"module": "worker.examples.digits_keras",
                       "args": ["--epochs", str(EPOCHS), "--steps-per-epoch", str(STEPS_PER_EPOCH)]},
        "workdir": str(REPO),
        "env": {"TF_USE_LEGACY_KERAS": "1", "TF_CPP_MIN_LOG_LEVEL": "2"},
        "checkpoint": {"dir": str(tmp_path / "unused")},
        "tasks": [{"type": "worker", "host": "localhost", "count": 2}],
        "restart": {"max_restarts": 0},
    })
    ckpt = tmp_path / "ckpt"
    with tf_job(tmp_path, ["run", str(spec)], ckpt) as job:
        pass
    run = finished(job, ckpt)
    assert run.exit_code == 0, run.stderr
    reports = [json.loads(line)
               for line in (run.run_dir / "metrics.jsonl").read_text().splitlines()]
    last = EPOCHS * STEPS_PER_EPOCH
    for task, stem in (("worker:0", "worker-0"), ("worker:1", "worker-1")):
        mine = [r for r in reports if r["task"] == task]
        assert {"loss", "accuracy"} <= set(mine[0]["metrics"])
        epochs = [r for r in mine if "epoch_loss" in r["metrics"]]
        assert [(r["step"], r["metrics"]["epoch"]) for r in epochs] == [
            (STEPS_PER_EPOCH * (e + 1), e) for e in range(EPOCHS)]
        board = run.run_dir / "tensorboard" / stem
        assert {"loss", "accuracy", "epoch_loss", "epoch_accuracy"} <= set(tags(board))
        assert scalars(board, "loss")[-1][0] == last
        assert [s for s, _ in scalars(board, "epoch_loss")] == [STEPS_PER_EPOCH, last]
