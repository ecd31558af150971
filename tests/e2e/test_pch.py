"""Real TensorFlow MWMS with TF's own preemption protocol (issue 9): ``worker.examples.pch_digits``,
a script that knows nothing of tfcluster and saves through
``tf.distribute.experimental.PreemptionCheckpointHandler``, on two simulated workers with
``restart.max_restarts: 0``.

A SIGTERM to worker:1 from outside (as a cloud's preemption would send it: tfcluster sees no
notice) makes every task save at one agreed step and exit 42. tfcluster must take that for a
preemption, not a crash: the restart is justified by the chief's newer checkpoint and is not
counted, and the job ends with the very weights of an uninterrupted run (the reference).
"""

from __future__ import annotations

import re
import signal
import time
from pathlib import Path

import pytest

from tests.e2e.tfjobs import (
    TEST_TIMEOUT_S,
    Finished,
    finished,
    requires_tf,
    signal_task,
    tf_job,
    wait_while_running,
)
from tests.support.jobs import REPO, Job, write_spec
from worker.wire.env import TF_RESTART_EXIT_CODE

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(TEST_TIMEOUT_S), requires_tf]

#: About 10 ms a step here: long enough to be preempted mid-way, and to outlast a 2 s grace.
STEPS = 600
#: SIGTERM once worker:1 has printed this step (it prints every 10).
SIGNAL_AFTER_STEP = 20
_RESUMED = re.compile(r"^\[pch (\S+)\] resumed at step (\d+)$", re.MULTILINE)
_STEP = re.compile(r"^\[pch worker:1\] step (\d+) ", re.MULTILINE)
_GRACE = re.compile(r"^\[pch (\S+)\] termination grace_period=(\S+)$", re.MULTILINE)


def pch_spec(tmp_path: Path, *, grace_period_s: float = 10.0,
             termination_config: bool = False, warm_spares: bool = False) -> Path:
    args = ["--steps", str(STEPS)] + (["--termination-config"] if termination_config else [])
    return write_spec(tmp_path, {
        "name": "pch-digits",
        "entrypoint": {"module": "worker.examples.pch_digits", "args": args},
        "workdir": str(REPO),
        "env": {"TF_CPP_MIN_LOG_LEVEL": "2"},
        "checkpoint": {"dir": str(tmp_path / "unused")},  # --checkpoint-dir overrides it
        "tasks": [{"type": "worker", "host": "localhost", "count": 2}],
        # warm spares: the script reports no step, so they are started with the attempt
        "restart": {"max_restarts": 0, "backoff_s": 0.5, "warm_spares": warm_spares,
                    "spare_fill_delay_s": 0.0},
        # the script reports no steps to tfcluster
        "health": {"startup_timeout_s": None, "hang_timeout_s": None,
                   "grace_period_s": grace_period_s},
    })


def wait_for_step(job: Job, step: int, timeout: float = 120) -> None:
    """Wait until worker:1 of attempt 0 has printed ``step`` (or a later one)."""
    log = job.run_dir / "attempt-0" / "worker-1.log"

    def reached() -> bool:
        text = log.read_text() if log.exists() else ""
        return any(int(found) >= step for found in _STEP.findall(text))

    wait_while_running(job, reached, f"worker:1 at step {step}", timeout)


def preempted_run(tmp_path: Path, spec: Path) -> tuple[Finished, float]:
    """The job of ``spec``, worker:1 SIGTERMed once training is under way; and when."""
    ckpt = tmp_path / "ckpt"
    with tf_job(tmp_path, ["run", str(spec)], ckpt) as job:
        wait_for_step(job, SIGNAL_AFTER_STEP)
        signal_task(job, "worker:1", signal.SIGTERM)
        signalled_at = time.time()
    return finished(job, ckpt), signalled_at


# Session scope: built once per xdist worker, even where other modules' tests run between
# this module's (a module fixture is built again after them).
@pytest.fixture(scope="session")
def reference(tmp_path_factory: pytest.TempPathFactory) -> Finished:
    tmp_path = tmp_path_factory.mktemp("reference")
    ckpt = tmp_path / "ckpt"
    with tf_job(tmp_path, ["run", str(pch_spec(tmp_path))], ckpt) as job:
        pass
    run = finished(job, ckpt)
    assert run.exit_code == 0, run.stderr
    assert run.last_attempt() == 0
    return run


def check_preempted_attempt(run: Finished, checkpoint_number: int) -> int:
    """Attempt 0 ended in TF's protocol (every task exited 42 by itself) and was restarted as a
    justified preemption from the chief's checkpoint; returns the step both tasks resumed at."""
    assert run.exit_code == 0, run.stderr
    events = run.events
    attempt0 = [e for e in events if e["event"] in ("task_failed", "task_exited")
                and e["attempt"] == 0]
    assert len(attempt0) == 2 and {e["exit_code"] for e in attempt0} == {TF_RESTART_EXIT_CODE}
    assert all(e.get("signal") is None for e in attempt0)  # none was TERMed or KILLed
    # each task exits 42 by itself: one or both are reported as the failure, never anything else
    failed = [e for e in events if e["event"] == "task_failed"]
    assert failed and all((e["attempt"], e["kind"], e["exit_code"]) == (0, "preempted", 42)
                          for e in failed), failed
    found, = (e for e in events if e["event"] == "checkpoint_found")
    # the chief's CheckpointManager numbers its checkpoints by save
    assert found["checkpoint"] == str(run.checkpoint_dir / f"ckpt-{checkpoint_number}")
    restart, = (e for e in events if e["event"] == "job_restarting")
    assert restart["counts_against_budget"] is False
    assert restart["reason"].startswith("graceful preemption"), restart["reason"]
    summary = run.summary()["attempts"][0]
    assert summary["counted_against_budget"] is False and summary["made_progress"] is True
    assert (summary["root_cause"]["kind"], summary["root_cause"]["exit_code"]) == ("preempted", 42)
    assert events[-1]["event"] == "job_succeeded"
    resumed = dict(_RESUMED.findall("".join(run.logs(1).values())))
    assert set(resumed) == {"worker:0", "worker:1"} and len(set(resumed.values())) == 1, resumed
    step = int(resumed["worker:0"])
    assert SIGNAL_AFTER_STEP < step < STEPS
    # the chief's directory holds its checkpoint alone; the non-chief's copies (in workertemp_1
    # beside it, where TF puts them: the handler removes one only after a preemption save) are
    # gone, the directory of the last attempt's too
    assert {p.name for p in run.checkpoint_dir.iterdir()} == {
        "checkpoint", f"ckpt-{checkpoint_number}.index",
        f"ckpt-{checkpoint_number}.data-00000-of-00001"}
    assert not list(run.checkpoint_dir.parent.glob("workertemp_*"))
    return step


def test_tfs_preemption_protocol_restarts_uncounted_and_loses_nothing(
        tmp_path: Path, reference: Finished) -> None:
    """TF's defaults: the handler saves at the next agreed step and exits 42 at once."""
    run, _ = preempted_run(tmp_path, pch_spec(tmp_path))
    check_preempted_attempt(run, checkpoint_number=1)
    assert run.final_hash() == reference.final_hash()


def test_termination_config_gives_the_handler_tfclusters_grace_period(
        tmp_path: Path, reference: Finished) -> None:
    """``--termination-config``: ``worker.termination_config()`` is a real TerminationConfig with
    ``grace_period`` = ``health.grace_period_s`` (4) less the 2 s reserve, and TF's own exit code.
    The handler saves at once, trains on through its grace period, saves again, exits 42; the
    weights are still those of the uninterrupted run (the flag changes nothing else)."""
    spec = pch_spec(tmp_path, grace_period_s=4.0, termination_config=True)
    run, signalled_at = preempted_run(tmp_path, spec)
    graces = dict(_GRACE.findall("".join(run.logs(0).values())))
    assert graces == {"worker:0": "2.0", "worker:1": "2.0"}
    check_preempted_attempt(run, checkpoint_number=2)  # a save at once, one at the end
    first_exit = min(e["ts"] for e in run.events if e["event"] == "task_failed")
    assert first_exit - signalled_at >= 1.0  # it trained on through (most of) its 2 s
    assert run.final_hash() == reference.final_hash()


def test_tfs_preemption_protocol_with_warm_spares_gives_the_same_weights(
        tmp_path: Path, reference: Finished) -> None:
    """The same preemption with ``restart.warm_spares``: the next attempt's tasks are the spares
    (TensorFlow imported before the SIGTERM), the script cannot tell, and the weights are still
    bit-identical to the uninterrupted run's."""
    run, _ = preempted_run(tmp_path, pch_spec(tmp_path, warm_spares=True))
    check_preempted_attempt(run, checkpoint_number=1)
    started = [e for e in run.events if e["event"] == "task_started" and e["attempt"] == 1]
    assert [e["warm"] for e in started] == [True, True], started
    assert run.summary()["attempts"][0]["spares_rss_bytes"] > 0
    assert run.final_hash() == reference.final_hash()
