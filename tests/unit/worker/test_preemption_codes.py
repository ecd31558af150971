"""Issue 9, part 1: TensorFlow's own preemption protocol (PreemptionCheckpointHandler, exit 42) is
a preemption, not a crash. ``restart.preemption_exit_codes`` (validated, default 42 and 143) flows
through the planner to the attempt; a PCH-style exit 42 that left a newer checkpoint restarts
outside the budget after the others got the full grace period; ``TFCLUSTER_GRACE_PERIOD_S`` carries
``health.grace_period_s`` to the tasks for ``worker.termination_config()``.

No TensorFlow here: the TF object itself is checked in tests/e2e/test_pch.py."""

from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from launcher.job.state import JobState
from launcher.run.failures import FailureKind, TaskFailure, classify_exit
from launcher.spec.errors import SpecError
from launcher.spec.loading import spec_from_dict
from launcher.spec.model import ClusterSpec
from tests.support.fake_backend import TaskScript
from tests.support.planning import named_planner
from tests.unit.job.test_job_loop import run
from tests.unit.job.test_job_loop import spec as loop_spec
from worker.termination import DEFAULT_RESERVE_S, grace_period_s, pch_grace_period
from worker.wire import env
from worker.wire.protocol import Exited, Terminate

REPO = Path(__file__).resolve().parents[3]


def make_spec(**restart: Any) -> dict[str, Any]:
    return {"name": "pch", "entrypoint": {"module": "train"},
            "tasks": [{"type": "worker", "count": 2}], "restart": restart}


def problems(data: dict[str, Any]) -> list[tuple[str, str]]:
    with pytest.raises(SpecError) as info:
        spec_from_dict(data, source="job.yaml")
    return [(p.path, p.message) for p in info.value.problems]


def planned(data: dict[str, Any], **health: Any) -> Any:
    data = {**data, "health": health} if health else data
    spec: ClusterSpec = spec_from_dict(data)
    return named_planner(spec, "/runs/pch").plan(0, {s.task: 21000 + i for i, s in
                                                   enumerate(spec.task_slots())})


# --- the spec field -------------------------------------------------------------------------------


def test_the_default_is_tfs_restart_code_and_143() -> None:
    spec = spec_from_dict(make_spec())
    assert spec.restart.preemption_exit_codes == [env.TF_RESTART_EXIT_CODE,
                                                  env.PREEMPTION_EXIT_CODE] == [42, 143]


def test_a_spec_can_name_its_own_codes() -> None:
    assert spec_from_dict(make_spec(preemption_exit_codes=[42])).restart.preemption_exit_codes \
        == [42]
    assert spec_from_dict(make_spec(preemption_exit_codes=[1, 255])).restart \
        .preemption_exit_codes == [1, 255]


@pytest.mark.parametrize(("codes", "path", "message"), [
    pytest.param([], "restart.preemption_exit_codes", "must not be empty", id="empty"),
    pytest.param([0], "restart.preemption_exit_codes[0]", "must be >= 1 (got 0)", id="zero"),
    pytest.param([42, 256], "restart.preemption_exit_codes[1]", "must be <= 255 (got 256)",
                 id="too-big"),
    pytest.param([-1], "restart.preemption_exit_codes[0]", "must be >= 1 (got -1)", id="negative"),
    pytest.param([True], "restart.preemption_exit_codes[0]", "must be an integer (got true)",
                 id="bool"),
    pytest.param(["42"], "restart.preemption_exit_codes[0]", "must be an integer (got '42')",
                 id="string"),
    pytest.param([42.0], "restart.preemption_exit_codes[0]", "must be an integer (got 42.0)",
                 id="float"),
    pytest.param(42, "restart.preemption_exit_codes", "must be a list (got 42)", id="scalar"),
    pytest.param(None, "restart.preemption_exit_codes", "must be a list (got null)", id="null"),
])
def test_bad_codes_are_named_by_field_path(codes: Any, path: str, message: str) -> None:
    assert problems(make_spec(preemption_exit_codes=codes)) == [(path, message)]


def test_every_bad_code_is_reported_at_once() -> None:
    found = problems(make_spec(preemption_exit_codes=[0, 42, 300], max_restarts=-1))
    assert [path for path, _ in found] == ["restart.max_restarts",
                                           "restart.preemption_exit_codes[0]",
                                           "restart.preemption_exit_codes[2]"]


# --- the plan -------------------------------------------------------------------------------------


def test_the_plan_carries_the_specs_codes() -> None:
    assert planned(make_spec()).preemption_exit_codes == frozenset({42, 143})
    assert planned(make_spec(preemption_exit_codes=[42])).preemption_exit_codes == frozenset({42})
    assert planned(make_spec(preemption_exit_codes=[7, 7])).preemption_exit_codes == frozenset({7})


@pytest.mark.parametrize(("grace", "text"), [(10, "10.0"), (2.5, "2.5"), (0.001, "0.001")])
def test_every_task_gets_the_grace_period_that_termination_config_reads(grace: float,
                                                                        text: str) -> None:
    launch_plan = planned(make_spec(), grace_period_s=grace)
    assert {t.env[env.GRACE_PERIOD_S] for t in launch_plan.tasks} == {text}
    assert all(grace_period_s(t.env) == grace for t in launch_plan.tasks)


def test_the_grace_period_travels_in_the_launch_message() -> None:
    launch_plan = planned(make_spec(), grace_period_s=7)
    for host in launch_plan.hosts:
        sent = launch_plan.launch_message(host)
        assert {task.env[env.GRACE_PERIOD_S] for task in sent.tasks} == {"7.0"}


# --- classification and wording -------------------------------------------------------------------


def exited(code: int) -> Exited:
    return Exited(task="worker:1", exit_code=code, ts=1.0)


@pytest.mark.parametrize(("codes", "code", "kind"), [
    (frozenset({42, 143}), 42, FailureKind.PREEMPTED),
    (frozenset({42, 143}), 143, FailureKind.PREEMPTED),
    (frozenset({42}), 143, FailureKind.EXITED),
    (frozenset({42}), 42, FailureKind.PREEMPTED),
    (frozenset({17}), 17, FailureKind.PREEMPTED),
    (frozenset({42, 143}), 1, FailureKind.EXITED),
])
def test_an_exit_is_a_preemption_only_with_one_of_the_plans_codes(
        codes: frozenset[int], code: int, kind: FailureKind) -> None:
    found, _ = classify_exit(exited(code), restore_failed=None, reported_steps=True,
                             preemption_codes=codes)
    assert found is kind


def test_the_preemption_headline_says_what_the_code_means_and_claims_no_save() -> None:
    failure = TaskFailure(task="worker:1", host="localhost", attempt=0,
                          kind=FailureKind.PREEMPTED, died_at=1.0, observed_at=1.0, exit_code=42)
    headline = failure.headline()
    assert headline.startswith("worker:1 on localhost (attempt 0) exited 42, a preemption exit "
                               "code (restart.preemption_exit_codes)")
    assert "sav" not in headline and "checkpoint" not in headline


# --- the job loop (fake backend, simulated time) --------------------------------------------------


def write_pch_checkpoint(directory: Path, number: int) -> None:
    """What PreemptionCheckpointHandler's chief leaves: CheckpointManager's layout, numbered by
    save (not by step)."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "checkpoint").write_text(f'model_checkpoint_path: "ckpt-{number}"\n'
                                          f'all_model_checkpoint_paths: "ckpt-{number}"\n')
    (directory / f"ckpt-{number}.index").write_bytes(b"index")
    (directory / f"ckpt-{number}.data-00000-of-00001").write_bytes(b"data")


def test_a_pch_exit_42_with_a_newer_checkpoint_waits_for_the_others_and_is_not_charged(
        tmp_path: Path) -> None:
    """SIGTERM to worker:1 from outside (no notice tfcluster could see): every task saves at the
    agreed step and exits 42 within the grace period; the chief's checkpoint justifies it."""
    ckpt = tmp_path / "ckpt"

    def scripts(attempt: int, task: str) -> TaskScript:
        if attempt == 0:
            if task == "chief:0":
                write_pch_checkpoint(ckpt, 1)
            return TaskScript(steps=5 if task == "worker:1" else 60,
                              exit_code=env.TF_RESTART_EXIT_CODE)
        return TaskScript(steps=10)

    data = loop_spec(tmp_path, checkpoint={"dir": str(ckpt)}, restart={"max_restarts": 0},
                     health={"grace_period_s": 7.0})
    job = run(tmp_path, data, scripts)

    assert job.result.state is JobState.SUCCEEDED
    first = job.result.attempts[0]
    cause = first.root_cause
    assert cause is not None
    assert (cause.task, cause.kind, cause.exit_code) == ("worker:1", FailureKind.PREEMPTED, 42)
    assert first.made_progress and first.preemption_notice is None and not first.charged
    failed, = job.of("task_failed")
    assert (failed["kind"], failed["exit_code"]) == ("preempted", 42)
    # the others took 5.5 s longer to save, within the 7 s grace: they exited by themselves
    attempt0 = [e for e in job.of("task_exited") if e["attempt"] == 0]
    assert {(e["task"], e["exit_code"], e["signal"]) for e in attempt0} == {
        ("chief:0", 42, None), ("worker:0", 42, None)}
    assert all(e["ts"] - failed["died_at"] >= 5.0 for e in attempt0)
    restarting, = job.of("job_restarting")
    assert restarting["counts_against_budget"] is False
    assert "graceful preemption" in restarting["reason"]
    assert restarting["resume_checkpoint"] == str(ckpt / "ckpt-1")
    summary_attempt = first.to_dict()
    assert summary_attempt["counted_against_budget"] is False
    assert summary_attempt["root_cause"]["kind"] == "preempted"


def test_a_code_left_out_of_the_spec_is_a_failure_like_any_other(tmp_path: Path) -> None:
    def scripts(attempt: int, task: str) -> TaskScript:
        if task == "worker:1":
            return TaskScript(steps=5, exit_code=env.PREEMPTION_EXIT_CODE)
        return TaskScript(steps=1000)

    data = loop_spec(tmp_path, restart={"max_restarts": 0, "preemption_exit_codes": [42]})
    job = run(tmp_path, data, scripts)

    assert job.result.state is JobState.FAILED
    assert job.result.exit_code == 143
    cause = job.result.attempts[0].root_cause
    assert cause is not None and cause.kind is FailureKind.EXITED
    # a crash: the survivors got the short failure grace, not the full one
    terms = [s.message for s in job.world.sent if isinstance(s.message, Terminate)]
    assert terms and {t.grace_period_s for t in terms} == {0.5}


# --- worker.termination (the env parsing; no TF) --------------------------------------------------


@pytest.mark.parametrize(("environ", "expected"), [
    ({}, None),
    ({env.GRACE_PERIOD_S: ""}, None),
    ({env.GRACE_PERIOD_S: "10.0"}, 10.0),
    ({env.GRACE_PERIOD_S: " 2.5 "}, 2.5),
    ({env.GRACE_PERIOD_S: "0"}, 0.0),
    ({env.GRACE_PERIOD_S: "1e-3"}, 0.001),
])
def test_grace_period_s_reads_the_env(environ: dict[str, str], expected: float | None) -> None:
    assert grace_period_s(environ) == expected


@pytest.mark.parametrize("raw", ["-1", "nan", "inf", "-inf", "ten", "10s", "1,5"])
def test_a_bad_grace_period_is_refused_naming_the_variable(raw: str) -> None:
    with pytest.raises(ValueError, match=f"{env.GRACE_PERIOD_S} must be a number of seconds >= 0, "
                                         f"not '{raw}'"):
        grace_period_s({env.GRACE_PERIOD_S: raw})


def test_grace_period_s_reads_os_environ_by_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(env.GRACE_PERIOD_S, "12.5")
    assert grace_period_s() == 12.5
    monkeypatch.delenv(env.GRACE_PERIOD_S)
    assert grace_period_s() is None


@pytest.mark.parametrize(("grace", "reserve", "expected"), [
    (None, DEFAULT_RESERVE_S, None),  # not under tfcluster: TF's platform default
    (10.0, DEFAULT_RESERVE_S, 8.0),
    (10.0, 0.0, 10.0),
    (2.0, DEFAULT_RESERVE_S, 0.0),  # no time for a second save: save at once
    (1.0, DEFAULT_RESERVE_S, 0.0),
    (30.0, 5.0, 25.0),
])
def test_pch_grace_period_keeps_the_reserve_back(grace: float | None, reserve: float,
                                                 expected: float | None) -> None:
    assert pch_grace_period(grace, reserve) == expected


@pytest.mark.parametrize("reserve", [-1.0, math.nan, math.inf])
def test_a_bad_reserve_is_refused(reserve: float) -> None:
    with pytest.raises(ValueError, match="reserve_s must be a number of seconds >= 0"):
        pch_grace_period(10.0, reserve)


def test_worker_termination_config_is_exported_without_importing_tensorflow() -> None:
    code = ("import sys, worker, worker.termination; from worker import termination_config; "
            "assert termination_config is worker.termination.termination_config; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in "
            "('tensorflow', 'keras', 'launcher')))")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True,
                         timeout=60, check=True)
    assert out.stdout.strip() == "[]"
