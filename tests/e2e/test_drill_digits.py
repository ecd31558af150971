"""Real TensorFlow: a digits drill with two faults in a row (a SIGKILLed worker, then a hung
chief) against a baseline must end with the baseline's weights hash, and write its report.

``cluster_specs/drills/digits-job.yaml`` with more steps (so that the chief is still training 15 s
after the restart) and a shorter hang timeout (so that the hang is detected quickly).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml

from tests.e2e.tfjobs import requires_tf
from tests.jobs import REPO, running, wait_until_gone

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(600), requires_tf]

STEPS = 2000
CHECKPOINT_EVERY = 50
HANG_TIMEOUT_S = 10  # the end of training (evaluation, hashing) must not look like a hang


def test_digits_kill_then_hang_ends_with_the_baselines_weights(tmp_path: Path) -> None:
    spec = yaml.safe_load((REPO / "cluster_specs" / "drills" / "digits-job.yaml").read_text())
    spec["entrypoint"]["args"] = ["--steps", str(STEPS), "--checkpoint-every",
                                  str(CHECKPOINT_EVERY), "--deterministic"]
    spec["health"]["hang_timeout_s"] = HANG_TIMEOUT_S
    path = tmp_path / "digits.yaml"
    path.write_text(yaml.safe_dump(spec))
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("TMPDIR", str(tmp))  # TF's autograph leaves files there
        argv = ["drill", str(path), "--fault", "kill:worker:1:at-step=120",
                "--fault", "stop:chief:after=15", "--baseline", "--quiet"]
        with running(argv, tmp_path / "run", REPO) as job:
            code = job.wait(560)
            assert wait_until_gone(job.mark, 15) == [], "processes left behind"
    assert code == 0, job.stdout + job.stderr
    run = tmp_path / "run"
    data = json.loads((run / "drill.json").read_text())
    baseline = data["baseline"]["result"]
    assert re.fullmatch(r"weights_sha256=[0-9a-f]{64}", baseline)
    scenario, = data["scenarios"]
    assert (scenario["result"], scenario["result_check"]) == (baseline, "match")
    # usually the kill comes first; on a loaded machine the chief may be stopped 15 s into the
    # first attempt before worker:1 reached step 120: each fires once, in its own attempt
    faults = {figures["fault"]: figures for figures in scenario["faults"]}
    kill, stop = faults["kill:worker:1:at-step=120"], faults["stop:chief:0:after=15"]
    assert {kill["attempt"], stop["attempt"]} == {0, 1}
    assert kill["detection_s"] > 0 and kill["detected_as"] == "signalled (worker:1)"
    # the hang is seen as one (health.hang_timeout_s), or first as a worker whose collective
    # with the stopped chief failed: either way not at once
    assert stop["detected_as"].split()[0] in ("hung", "exited") and stop["detection_s"] > 1
    for figures in (kill, stop):
        assert 0 <= figures["steps_lost"] <= CHECKPOINT_EVERY
        assert figures["recovery_s"] > figures["detection_s"]
    assert scenario["restarts"] >= 2
    assert (run / "drill.png").stat().st_size > 10_000
    assert "| drill " in (run / "drill.md").read_text()


def test_digits_survives_losing_its_coordinator_with_the_baselines_weights(
        tmp_path: Path) -> None:
    spec = REPO / "cluster_specs" / "drills" / "digits-job.yaml"
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("TMPDIR", str(tmp))
        argv = ["drill", str(spec), "--fault", "kill-coordinator:at-step=150", "--baseline",
                "--quiet"]
        with running(argv, tmp_path / "run", REPO) as job:
            code = job.wait(560)
            assert wait_until_gone(job.mark, 15) == [], "processes left behind"
    assert code == 0, job.stdout + job.stderr
    scenario, = json.loads((tmp_path / "run" / "drill.json").read_text())["scenarios"]
    loss = scenario["coordinator_loss"]
    assert loss["killed"] and loss["survivors"] == [] and loss["tasks_gone_s"] < 5
    assert loss["resume_exit_code"] == 0
    assert scenario["result_check"] == "match"
    figures, = scenario["faults"]
    assert figures["resume_step"] >= CHECKPOINT_EVERY  # from a checkpoint, not from scratch
