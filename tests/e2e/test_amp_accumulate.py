"""Real TensorFlow MWMS: the digits example with ``--mixed-precision`` (a LossScaleOptimizer whose
dynamic scale grows every few applied steps) and ``--accumulate 7``, together and each alone; 2
workers, 300 steps, a checkpoint every 50. No checkpoint step is a multiple of 7, so with
accumulation every checkpoint is taken in the middle of one (partial sums in the accumulators),
and the loss scale's growth counter is part-way at each. A worker SIGKILLed after the first
checkpoint makes the job restart from one of them; the resumed job must end with the very weights
(hash) and loss scale of an uninterrupted run of the same flags.
"""

from __future__ import annotations

import re
import signal
from pathlib import Path

import pytest

from tests.e2e.tfjobs import (
    TEST_TIMEOUT_S,
    Finished,
    finished,
    requires_tf,
    signal_task,
    tf_job,
    wait_for_file,
)
from tests.support.jobs import REPO, write_spec

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(2 * TEST_TIMEOUT_S), requires_tf]

STEPS = 300
CHECKPOINT_EVERY = 50
ACCUMULATE = 7  # coprime with 50: every checkpoint below 350 is mid-accumulation
_LOSS_SCALE = re.compile(r"^loss_scale=(\S+)$", re.MULTILINE)

#: name -> (flags, accumulating); the loss scale grows every 5 applies (every 35 steps) with
#: accumulation, every 7 steps without: never on a checkpoint step.
VARIANTS = {
    "amp+accumulate": (["--mixed-precision", "--loss-scale-growth-steps", "5",
                        "--accumulate", str(ACCUMULATE)], True),
    "accumulate": (["--accumulate", str(ACCUMULATE)], True),
    "amp": (["--mixed-precision", "--loss-scale-growth-steps", "7"], False),
}


def spec_with(tmp_path: Path, flags: list[str]) -> Path:
    return write_spec(tmp_path, {
        "name": "digits-amp-accumulate",
        "entrypoint": {"module": "worker.examples.digits",
                       "args": ["--steps", str(STEPS), "--checkpoint-every", str(CHECKPOINT_EVERY),
                                "--deterministic", *flags]},
        "workdir": str(REPO),
        "env": {"TF_CPP_MIN_LOG_LEVEL": "2"},
        "checkpoint": {"dir": str(tmp_path / "unused")},  # --checkpoint-dir overrides it
        "tasks": [{"type": "worker", "host": "localhost", "count": 2}],
        "restart": {"max_restarts": 2, "backoff_s": 0.5},
        "health": {"grace_period_s": 10},
    })


def loss_scales(run: Finished) -> set[str]:
    return {scale for text in run.logs(run.last_attempt()).values()
            for scale in _LOSS_SCALE.findall(text)}


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_a_job_killed_between_two_checkpoints_resumes_bit_exactly(
        tmp_path: Path, variant: str) -> None:
    flags, accumulating = VARIANTS[variant]
    amp = "--mixed-precision" in flags
    spec = spec_with(tmp_path, flags)
    (tmp_path / "reference").mkdir()
    reference_ckpt = tmp_path / "reference" / "ckpt"
    with tf_job(tmp_path / "reference", ["run", str(spec)], reference_ckpt) as job:
        pass
    reference = finished(job, reference_ckpt)
    assert reference.exit_code == 0, reference.stderr
    scale = loss_scales(reference)
    if amp:
        assert len(scale) == 1 and float(next(iter(scale))) > 32768, scale  # the scale grew
    else:
        assert scale == set()

    (tmp_path / "killed").mkdir()
    ckpt = tmp_path / "killed" / "ckpt"
    with tf_job(tmp_path / "killed", ["run", str(spec)], ckpt) as job:
        wait_for_file(job, ckpt / "checkpoint")
        signal_task(job, "worker:1", signal.SIGKILL)
    run = finished(job, ckpt)
    assert run.exit_code == 0, run.stderr
    found = next(e for e in run.events if e["event"] == "checkpoint_found")
    step = found["step"]
    assert 0 < step < STEPS, found
    if accumulating:
        assert step % ACCUMULATE != 0, found  # resumed mid-accumulation
    assert run.first_steps(1) == {step + 1}
    assert run.events[-1]["event"] == "job_succeeded"
    assert run.final_hash() == reference.final_hash()
    assert loss_scales(run) == scale
