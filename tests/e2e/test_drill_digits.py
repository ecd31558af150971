"""Real TensorFlow: digits drills against one uninterrupted baseline run must end with its weights
hash: two faults in a row (a SIGKILLed worker, then a hung chief), and the loss of the coordinator
itself (then ``run --resume``). Both use ``cluster_specs/drills/digits-job.yaml`` as shipped.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tests.e2e.tfjobs import requires_tf
from tests.support.jobs import REPO, running, wait_until_gone

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(600), requires_tf]

SPEC = REPO / "cluster_specs" / "drills" / "digits-job.yaml"
CHECKPOINT_EVERY = 50  # as in the spec


# Session scope: built once per xdist worker, even where other modules' tests run between
# this module's (a module fixture is built again after them).
@pytest.fixture(scope="session")
def baseline(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One uninterrupted run of the spec, for every drill here (``--baseline-from``)."""
    root = tmp_path_factory.mktemp("baseline")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("TMPDIR", str(root))  # TF's autograph leaves files there
        argv = ["run", str(SPEC), "--checkpoint-dir", str(root / "ckpt"), "--quiet"]
        with running(argv, root / "run", REPO) as job:
            code = job.wait(300)
            assert wait_until_gone(job.mark, 15) == [], "processes left behind"
    assert code == 0, job.stdout + job.stderr
    return root / "run"


def drill(tmp_path: Path, baseline: Path, *faults: str) -> Path:
    """``tfcluster drill SPEC --fault ... --baseline-from BASELINE``; its run directory."""
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    argv = ["drill", str(SPEC), *(arg for fault in faults for arg in ("--fault", fault)),
            "--baseline-from", str(baseline), "--quiet"]
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("TMPDIR", str(tmp))
        with running(argv, tmp_path / "run", REPO) as job:
            code = job.wait(560)
            assert wait_until_gone(job.mark, 15) == [], "processes left behind"
    assert code == 0, job.stdout + job.stderr
    return tmp_path / "run"


def test_digits_kill_then_hang_ends_with_the_baselines_weights(tmp_path: Path,
                                                               baseline: Path) -> None:
    """worker:1 is killed at step 120 (the job resumes from 100), then the chief is stopped at
    step 250 of the next attempt: a hang, detected by ``health.hang_timeout_s``."""
    run = drill(tmp_path, baseline, "kill:worker:1:at-step=120", "stop:chief:at-step=250")
    data = json.loads((run / "drill.json").read_text())
    result = data["baseline"]["result"]
    assert re.fullmatch(r"weights_sha256=[0-9a-f]{64}", result)
    scenario, = data["scenarios"]
    assert (scenario["result"], scenario["result_check"]) == (result, "match")
    faults = {figures["fault"]: figures for figures in scenario["faults"]}
    kill, stop = faults["kill:worker:1:at-step=120"], faults["stop:chief:0:at-step=250"]
    assert (kill["attempt"], stop["attempt"]) == (0, 1)
    assert kill["detection_s"] > 0 and kill["detected_as"] == "signalled (worker:1)"
    # the hang is seen as one, or first as a worker whose collective with the stopped chief
    # failed: either way not at once
    assert stop["detected_as"].split()[0] in ("hung", "exited") and stop["detection_s"] > 1
    for figures in (kill, stop):
        assert 0 <= figures["steps_lost"] <= CHECKPOINT_EVERY
        assert figures["recovery_s"] > figures["detection_s"]
    assert scenario["restarts"] >= 2
    assert (run / "drill.png").stat().st_size > 10_000
    assert "| drill " in (run / "drill.md").read_text()


def test_digits_survives_losing_its_coordinator_with_the_baselines_weights(
        tmp_path: Path, baseline: Path) -> None:
    run = drill(tmp_path, baseline, "kill-coordinator:at-step=150")
    scenario, = json.loads((run / "drill.json").read_text())["scenarios"]
    loss = scenario["coordinator_loss"]
    assert loss["killed"] and loss["survivors"] == [] and loss["tasks_gone_s"] < 5
    assert loss["resume_exit_code"] == 0
    assert scenario["result_check"] == "match"
    figures, = scenario["faults"]
    assert figures["resume_step"] >= CHECKPOINT_EVERY  # from a checkpoint, not from scratch
