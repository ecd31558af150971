"""Real TensorFlow MWMS: ``cluster_specs/local-2workers.yaml`` (digits, 2 workers, deterministic,
300 steps, a checkpoint every 50) uninterrupted, after a SIGKILL, and after a graceful preemption.

The uninterrupted run is the reference: a restarted or preempted job must end with the very same
weights (same hash), i.e. it resumed exactly where its checkpoint left it, losing nothing.
"""

from __future__ import annotations

import json
import re
import signal
from pathlib import Path

import pytest
import yaml

from tests.e2e.tfjobs import (
    TEST_TIMEOUT_S,
    Finished,
    finished,
    requires_tf,
    signal_task,
    tf_job,
    wait_for_file,
    wait_for_spares,
)
from tests.support.jobs import REPO
from worker.wire.env import PREEMPTION_EXIT_CODE

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(TEST_TIMEOUT_S), requires_tf]

SPEC = REPO / "cluster_specs" / "local-2workers.yaml"
STEPS = 300
CHECKPOINT_EVERY = 50
_CLUSTER = re.compile(r"^\[digits (\S+)\] cluster (\{.*\}) task (\S+)$", re.MULTILINE)
_PREEMPTED = re.compile(r"^\[digits \S+\] preempted: checkpoint saved at step (\d+)", re.MULTILINE)


def run_spec(tmp_path: Path) -> tuple[list[str], Path]:
    return ["run", str(SPEC)], tmp_path / "ckpt"


# Session scope: built once per xdist worker, even where other modules' tests run between
# this module's (a module fixture is built again after them).
@pytest.fixture(scope="session")
def reference(tmp_path_factory: pytest.TempPathFactory) -> Finished:
    """The uninterrupted run, shared: its weights hash is what every other run must end with."""
    tmp_path = tmp_path_factory.mktemp("reference")
    argv, ckpt = run_spec(tmp_path)
    with tf_job(tmp_path, argv, ckpt) as job:
        pass
    return finished(job, ckpt)


def test_an_uninterrupted_run_trains_one_cluster_and_keeps_only_the_chiefs_checkpoints(
        reference: Finished) -> None:
    assert reference.exit_code == 0, reference.stderr
    events = reference.events
    assert events[-1]["event"] == "job_succeeded"
    ports = next(e for e in events if e["event"] == "attempt_started")["ports"]
    clusters = {}
    for task, text in reference.logs(0).items():
        (logged_as, cluster, tf_task), = _CLUSTER.findall(text)
        assert logged_as == tf_task == task  # TF sees the task tfcluster started
        clusters[task] = json.loads(cluster)
    expected = {"worker": [f"localhost:{ports['worker:0']}", f"localhost:{ports['worker:1']}"]}
    assert clusters == {"worker:0": expected, "worker:1": expected}  # one cluster, both tasks
    accuracies = reference.accuracies()
    assert len(accuracies) == 2 and min(accuracies.values()) > 0.9, accuracies
    reference.final_hash()  # printed, and the same on both tasks
    kept = {p.name for p in reference.checkpoint_dir.iterdir()}
    assert f"ckpt-{STEPS}.index" in kept
    assert all(name == "checkpoint" or re.fullmatch(r"ckpt-\d+\.(index|data-\d{5}-of-\d{5})", name)
               for name in kept), kept  # no workertemp_* and nothing else


def test_a_sigkilled_worker_restarts_the_job_from_the_chiefs_checkpoint(
        tmp_path: Path, reference: Finished) -> None:
    argv, ckpt = run_spec(tmp_path)
    with tf_job(tmp_path, argv, ckpt) as job:
        wait_for_file(job, ckpt / "checkpoint")  # the first checkpoint is complete
        signal_task(job, "worker:1", signal.SIGKILL)
    run = finished(job, ckpt)
    assert run.exit_code == 0, run.stderr
    events = run.events
    failed = next(e for e in events if e["event"] == "task_failed")
    assert (failed["task"], failed["signal"], failed["kind"]) == ("worker:1", "SIGKILL",
                                                                  "signalled")
    found = next(e for e in events if e["event"] == "checkpoint_found")
    assert 0 < found["step"] < STEPS and found["step"] % CHECKPOINT_EVERY == 0
    restart = next(e for e in events if e["event"] == "job_restarting")
    assert restart["resume_step"] == found["step"] and restart["counts_against_budget"]
    assert run.first_steps(1) == {found["step"] + 1}  # both tasks resumed right there
    assert events[-1]["event"] == "job_succeeded"
    assert run.final_hash() == reference.final_hash()


def test_sigterm_to_one_worker_preempts_every_task_at_one_step_and_loses_nothing(
        tmp_path: Path, reference: Finished) -> None:
    argv, ckpt = run_spec(tmp_path)
    with tf_job(tmp_path, argv, ckpt) as job:
        wait_for_file(job, ckpt / "checkpoint")
        job.wait_event(lambda e: e["event"] == "task_progress" and e["step"] > CHECKPOINT_EVERY,
                       timeout=120)  # between two periodic checkpoints, most likely
        signal_task(job, "worker:1", signal.SIGTERM)
    run = finished(job, ckpt)
    assert run.exit_code == 0, run.stderr
    events = run.events
    stopped_at = {task: [int(s) for s in _PREEMPTED.findall(text)]
                  for task, text in run.logs(0).items()}
    step = stopped_at["worker:1"][0]
    assert stopped_at == {"worker:0": [step], "worker:1": [step]}  # the same step everywhere
    assert CHECKPOINT_EVERY < step < STEPS
    exits = [e for e in events if e["event"] in ("task_failed", "task_exited")
             and e["attempt"] == 0]
    assert {e["exit_code"] for e in exits} == {PREEMPTION_EXIT_CODE} and len(exits) == 2
    failed = next(e for e in events if e["event"] == "task_failed")
    assert failed["kind"] == "preempted"
    found = next(e for e in events if e["event"] == "checkpoint_found")
    assert found["step"] == step and found["checkpoint"] == str(ckpt / f"ckpt-{step}")
    restart = next(e for e in events if e["event"] == "job_restarting")
    assert restart["counts_against_budget"] is False
    assert restart["resume_step"] == step
    assert run.first_steps(1) == {step + 1}
    assert run.summary()["attempts"][0]["steps_lost"] == 0
    assert events[-1]["event"] == "job_succeeded"
    assert run.final_hash() == reference.final_hash()
    assert not list(ckpt.glob("workertemp_*"))


def test_a_sigkilled_worker_restarts_from_warm_spares_with_the_same_result(
        tmp_path: Path, reference: Finished) -> None:
    spec = yaml.safe_load(SPEC.read_text())
    spec["restart"]["warm_spares"] = True  # preload: tensorflow (the default)
    # spares made with the attempt, not at its first checkpoint: this job trains for ~3 s only,
    # less than a spare's import of TensorFlow, and a spare still importing is not used
    spec["restart"]["spare_fill_delay_s"] = 0.0
    warm_spec = tmp_path / "warm.yaml"
    warm_spec.write_text(yaml.safe_dump(spec))
    ckpt = tmp_path / "ckpt"
    with tf_job(tmp_path, ["run", str(warm_spec)], ckpt) as job:
        wait_for_spares(job, ("worker:0", "worker:1"))
        wait_for_file(job, ckpt / "checkpoint")
        signal_task(job, "worker:1", signal.SIGKILL)
    run = finished(job, ckpt)
    assert run.exit_code == 0, run.stderr
    started = [e for e in run.events if e["event"] == "task_started" and e["attempt"] == 1]
    assert [e["warm"] for e in started] == [True, True], started  # the spares became the tasks
    assert run.first_steps(1) == {next(e for e in run.events
                                       if e["event"] == "checkpoint_found")["step"] + 1}
    assert run.final_hash() == reference.final_hash()
    assert run.summary()["attempts"][0]["spares_rss_bytes"] > 0  # what the spares cost
