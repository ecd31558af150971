"""Real TensorFlow MWMS, 3 tasks (chief + 2 workers): ``digits --export DIR`` saves the trained
model with ``worker.save_model``. Every task saves (MWMS needs it), only the chief's SavedModel is
kept at DIR, the other copies are gone, ``summary.json`` records the export, and a fresh process
with nothing but ``tf.saved_model.load`` serves it: same predictions as the trained model had.
Then tf_keras ``fit`` (2 workers) with ``worker.saving.model_checkpoint`` (``.h5`` per epoch) and
a final ``.keras`` export: the chief's files only, each reported, each loadable by tf_keras.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.e2e.tfjobs import TEST_TIMEOUT_S, finished, requires_tf, tf_job
from tests.support.jobs import REPO, write_spec

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(TEST_TIMEOUT_S), requires_tf]

STEPS = 120

#: Run in a fresh interpreter: load the SavedModel with plain TensorFlow and score the test split.
LOAD = """
import json, sys
import numpy as np
import tensorflow as tf
from worker.examples.digits import load_data
_, _, x_test, y_test = load_data()
served = tf.saved_model.load(sys.argv[1])
logits = served.serve(tf.constant(x_test))
print(json.dumps({"accuracy": float(np.mean(np.argmax(logits.numpy(), axis=1) == y_test))}))
"""


def test_a_three_task_job_exports_one_savedmodel_that_a_fresh_process_serves(
        tmp_path: Path) -> None:
    export = tmp_path / "exports" / "digits"
    spec = write_spec(tmp_path, {
        "name": "digits-export",
        "entrypoint": {"module": "worker.examples.digits",
                       # the default global batch, 64, is split 21/21/22
                       "args": ["--steps", str(STEPS), "--deterministic",
                                "--export", str(export)]},
        "workdir": str(REPO),
        "env": {"TF_CPP_MIN_LOG_LEVEL": "2"},
        "checkpoint": {"dir": str(tmp_path / "unused")},
        "tasks": [{"type": "chief", "host": "localhost"},
                  {"type": "worker", "host": "localhost", "count": 2}],
        "restart": {"max_restarts": 0},
    })
    ckpt = tmp_path / "ckpt"
    with tf_job(tmp_path, ["run", str(spec)], ckpt) as job:
        pass
    run = finished(job, ckpt)
    assert run.exit_code == 0, run.stderr
    assert (export / "saved_model.pb").is_file()
    assert sorted(p.name for p in export.parent.iterdir()) == ["digits"]  # no workertemp_*
    exported = [e for e in run.events if e["event"] == "model_exported"]
    assert [(e["task"], e["path"], e["format"]) for e in exported] == [
        ("chief:0", str(export), "saved_model")]
    summary = run.summary()
    assert summary["export"] == {"attempt": 0, "task": "chief:0", "path": str(export),
                                 "format": "saved_model"}
    trained = run.accuracies()
    assert len(trained) == 3 and len(set(trained.values())) == 1, trained

    served = subprocess.run([sys.executable, "-c", LOAD, str(export)], cwd=REPO,
                            capture_output=True, text=True, timeout=120, check=False,
                            env={"PATH": "/usr/bin:/bin", "TF_CPP_MIN_LOG_LEVEL": "2"})
    assert served.returncode == 0, served.stderr
    accuracy = json.loads(served.stdout.strip().splitlines()[-1])["accuracy"]
    assert accuracy == pytest.approx(trained["chief:0"], abs=1e-4)
    assert accuracy > 0.85


#: The tf_keras side: the files a fresh process loads with tf_keras alone.
LOAD_KERAS = """
import json, os, sys
os.environ["TF_USE_LEGACY_KERAS"] = "1"
import numpy as np
import tf_keras
from worker.examples.digits import load_data
_, _, x_test, y_test = load_data()
scores = {}
for path in sys.argv[1:]:
    logits = tf_keras.models.load_model(path, compile=False)(x_test)
    scores[os.path.basename(path)] = float(np.mean(np.argmax(np.asarray(logits), axis=1) == y_test))
print(json.dumps(scores))
"""


def test_keras_fit_saves_each_epoch_and_the_final_model_on_the_chief_only(
        tmp_path: Path) -> None:
    models = tmp_path / "models"
    spec = write_spec(tmp_path, {
        "name": "digits-keras-export",
        "entrypoint": {"module": "worker.examples.digits_keras",
                       "args": ["--epochs", "2", "--steps-per-epoch", "20",
                                "--model-checkpoint", str(models / "e{epoch}.h5"),
                                "--export", str(models / "final.keras")]},
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
    assert sorted(p.name for p in models.iterdir()) == ["e1.h5", "e2.h5", "final.keras"]
    exported = [(e["task"], e["path"], e["format"]) for e in run.events
                if e["event"] == "model_exported"]
    assert exported == [("worker:0", str(models / "e1.h5"), "h5"),
                        ("worker:0", str(models / "e2.h5"), "h5"),
                        ("worker:0", str(models / "final.keras"), "keras")]
    assert run.summary()["export"]["path"] == str(models / "final.keras")

    served = subprocess.run([sys.executable, "-c", LOAD_KERAS, str(models / "e2.h5"),
                             str(models / "final.keras")], cwd=REPO, capture_output=True,
                            text=True, timeout=120, check=False,
                            env={"PATH": "/usr/bin:/bin", "TF_CPP_MIN_LOG_LEVEL": "2"})
    assert served.returncode == 0, served.stderr
    scores = json.loads(served.stdout.strip().splitlines()[-1])
    trained = run.accuracies()["worker:0"]
    assert scores == {"e2.h5": pytest.approx(trained, abs=1e-4),
                      "final.keras": pytest.approx(trained, abs=1e-4)}
