"""The restart policy (a table of histories -> decisions) and failures as data, root cause first."""

from __future__ import annotations

import json
from typing import Any, NamedTuple

import pytest

from launcher.job.policy import MAX_PORT_RETRIES, Action, decide, restarts_used
from launcher.run.failures import FailureKind, TaskFailure, format_report, is_port_conflict, root_cause
from launcher.run.outcome import AttemptResult, AttemptStatus
from launcher.spec.health import RestartSpec


def failure(task: str = "worker:0", died_at: float = 100.0, kind: FailureKind = FailureKind.EXITED,
            **fields: Any) -> TaskFailure:
    fields.setdefault("exit_code", 1 if kind is FailureKind.EXITED else None)
    return TaskFailure(task=task, host="localhost", attempt=fields.pop("attempt", 0), kind=kind,
                       died_at=died_at, observed_at=fields.pop("observed_at", died_at + 0.01),
                       **fields)


def ok() -> AttemptResult:
    return AttemptResult(attempt=0, status=AttemptStatus.SUCCEEDED, started_at=0.0, ended_at=1.0)


def failed(*failures: TaskFailure) -> AttemptResult:
    return AttemptResult(attempt=0, status=AttemptStatus.FAILED, started_at=0.0, ended_at=1.0,
                         failures=failures or (failure(),))


def port_clash() -> AttemptResult:
    # The task that could not bind died first; its peers failed after it.
    return failed(failure("worker:1", 10.0, FailureKind.PORT_CONFLICT),
                  failure("worker:0", 11.0, FailureKind.EXITED))


def preempted() -> AttemptResult:
    """A task saved a checkpoint on a preemption notice and exited with TF's restartable code
    (the coordinator found that newer checkpoint after the attempt)."""
    return AttemptResult(attempt=0, status=AttemptStatus.FAILED, started_at=0.0, ended_at=1.0,
                         failures=(failure("worker:1", 10.0, FailureKind.PREEMPTED, exit_code=143),),
                         made_progress=True, checkpoint_step=400)


def step_mismatch() -> AttemptResult:
    return failed(failure("worker:1", 10.0, FailureKind.STEP_MISMATCH, exit_code=None,
                          message="started from step 100, chief:0 from step 200"))


def stuck(checkpoint_step: int | None = 300) -> AttemptResult:
    """A failed attempt that moved the latest checkpoint no further."""
    return AttemptResult(attempt=0, status=AttemptStatus.FAILED, started_at=0.0, ended_at=1.0,
                         failures=(failure(),), made_progress=False, checkpoint_step=checkpoint_step)


def progressed() -> AttemptResult:
    return AttemptResult(attempt=0, status=AttemptStatus.FAILED, started_at=0.0, ended_at=1.0,
                         failures=(failure(),), made_progress=True, checkpoint_step=400)


def interrupted(signal_name: str) -> AttemptResult:
    return AttemptResult(attempt=0, status=AttemptStatus.INTERRUPTED, started_at=0.0, ended_at=1.0,
                         interrupt_signal=signal_name)


def renumber(history: list[AttemptResult]) -> list[AttemptResult]:
    return [AttemptResult(**{**r.__dict__, "attempt": i}) for i, r in enumerate(history)]


R3 = RestartSpec(max_restarts=3, backoff_s=1.0, backoff_max_s=30.0)
R0 = RestartSpec(max_restarts=0)
CAPPED = RestartSpec(max_restarts=6, backoff_s=10.0, backoff_max_s=25.0)
NO_WAIT = RestartSpec(max_restarts=2, backoff_s=0.0, backoff_max_s=0.0)
R5 = RestartSpec(max_restarts=5)  # crash_loop_attempts: 3 (the default)
NO_LOOP_CHECK = RestartSpec(max_restarts=5, crash_loop_attempts=None)
F = failed  # short names for the table
P = port_clash


class Want(NamedTuple):
    action: Action
    backoff_s: float
    counts: bool
    fresh_ports: bool
    reason: str  # a fragment of Decision.reason


DECISIONS = [
    # (history, restart spec, ports allocated, Want(action, backoff, counts, fresh ports, reason))
    pytest.param([ok()], R3, True, Want(Action.SUCCEED, 0.0, False, False, "every task exited 0"),
                 id="success"),
    pytest.param([F(), F(), ok()], R3, True, Want(Action.SUCCEED, 0.0, False, False, "exited 0"),
                 id="success-after-restarts"),
    pytest.param([interrupted("SIGINT")], R3, True, Want(Action.FAIL, 0.0, False, False,
                 "stopped by SIGINT"), id="interrupted"),
    pytest.param([F(), interrupted("SIGTERM")], R3, True, Want(Action.FAIL, 0.0, False, False,
                 "stopped by SIGTERM"), id="interrupted-with-budget-left"),
    pytest.param([F()], R3, True, Want(Action.RESTART, 1.0, True, False, "restart 1 of 3"),
                 id="first-failure"),
    pytest.param([F(), F()], R3, True, Want(Action.RESTART, 2.0, True, False, "restart 2 of 3"),
                 id="second-failure"),
    pytest.param([F(), F(), F()], R3, True, Want(Action.RESTART, 4.0, True, False, "restart 3 of 3"),
                 id="third-failure"),
    pytest.param([F(), F(), F(), F()], R3, True, Want(Action.FAIL, 0.0, False, False,
                 "gave up after 3 restart(s)"), id="budget-spent"),
    pytest.param([F()], R0, True, Want(Action.FAIL, 0.0, False, False, "restarts are off"),
                 id="no-restarts-allowed"),
    pytest.param([F()], CAPPED, True, Want(Action.RESTART, 10.0, True, False, "restart 1 of 6"),
                 id="backoff-base"),
    pytest.param([F(), F()], CAPPED, True, Want(Action.RESTART, 20.0, True, False, "restart 2 of 6"),
                 id="backoff-doubles"),
    pytest.param([F(), F(), F()], CAPPED, True, Want(Action.RESTART, 25.0, True, False, "restart 3 of 6"),
                 id="backoff-capped"),
    pytest.param([F()] * 6, CAPPED, True, Want(Action.RESTART, 25.0, True, False, "restart 6 of 6"),
                 id="backoff-stays-capped"),
    pytest.param([F()], NO_WAIT, True, Want(Action.RESTART, 0.0, True, False, "restart 1 of 2"),
                 id="zero-backoff"),
    # start-up port clashes on allocated ports: fresh ports, outside the budget
    pytest.param([P()], R3, True, Want(Action.RESTART, 0.0, False, True, "fresh ports"),
                 id="port-clash"),
    pytest.param([P()] * MAX_PORT_RETRIES, R3, True, Want(Action.RESTART, 0.0, False, True,
                 "fresh ports"), id="port-clash-last-retry"),
    pytest.param([F(), F(), F(), P()], R3, True, Want(Action.RESTART, 0.0, False, True, "fresh ports"),
                 id="port-clash-after-budget-spent"),
    pytest.param([P(), P(), F()], R3, True, Want(Action.RESTART, 1.0, True, False, "restart 1 of 3"),
                 id="port-clashes-not-charged"),
    pytest.param([P(), F(), F(), F(), F()], R3, True, Want(Action.FAIL, 0.0, False, False,
                 "gave up after 3 restart(s)"), id="port-clash-then-budget"),
    pytest.param([P()], R0, True, Want(Action.RESTART, 0.0, False, True, "fresh ports"),
                 id="port-clash-with-zero-budget"),
    # the spec chose the port: retrying cannot help
    pytest.param([P()], R3, False, Want(Action.FAIL, 0.0, False, False, "port the spec gives it"),
                 id="spec-port-clash"),
    # graceful preemption: resume from the checkpoint it saved, outside the budget
    pytest.param([preempted()], R3, True, Want(Action.RESTART, 0.0, False, False, "preemption"),
                 id="preempted"),
    pytest.param([F(), F(), F(), preempted()], R3, True,
                 Want(Action.RESTART, 0.0, False, False, "preemption"),
                 id="preempted-after-budget-spent"),
    pytest.param([preempted(), preempted(), F()], R3, True,
                 Want(Action.RESTART, 1.0, True, False, "restart 1 of 3"),
                 id="preemptions-not-charged"),
    # tasks that resumed from different steps would do so again
    pytest.param([step_mismatch()], R3, True, Want(Action.FAIL, 0.0, False, False, "different steps"),
                 id="step-mismatch"),
    # crash loops: consecutive charged attempts that moved no checkpoint forward
    pytest.param([stuck(), stuck()], R5, True, Want(Action.RESTART, 2.0, True, False, "restart 2 of 5"),
                 id="two-stuck-attempts"),
    pytest.param([stuck(), stuck(), stuck(300)], R5, True,
                 Want(Action.FAIL, 0.0, False, False, "crash loop: 3 attempts"),
                 id="crash-loop"),
    pytest.param([stuck(None)] * 3, R5, True,
                 Want(Action.FAIL, 0.0, False, False, "latest checkpoint step: none"),
                 id="crash-loop-without-checkpoint"),
    pytest.param([stuck(), progressed(), stuck(), stuck()], R5, True,
                 Want(Action.RESTART, 8.0, True, False, "restart 4 of 5"),
                 id="progress-breaks-the-loop"),
    pytest.param([stuck(), P(), stuck(), stuck()], R5, True,
                 Want(Action.FAIL, 0.0, False, False, "crash loop: 3 attempts"),
                 id="port-clash-does-not-break-the-loop"),
    pytest.param([stuck()] * 4, NO_LOOP_CHECK, True,
                 Want(Action.RESTART, 8.0, True, False, "restart 4 of 5"), id="loop-check-off"),
    pytest.param([F()] * 4, R5, True, Want(Action.RESTART, 8.0, True, False, "restart 4 of 5"),
                 id="no-checkpoints-no-loop-check"),
    # a port-conflict line from a task that was not the first to die is not a port clash
    pytest.param([F(failure("worker:0", 5.0), failure("worker:1", 6.0, FailureKind.PORT_CONFLICT))],
                 R3, True, Want(Action.RESTART, 1.0, True, False, "restart 1 of 3"),
                 id="port-conflict-not-root-cause"),
]


@pytest.mark.parametrize(("history", "restart", "allocated", "want"), DECISIONS)
def test_decide(history: list[AttemptResult], restart: RestartSpec, allocated: bool,
                want: Want) -> None:
    decision = decide(renumber(history), restart, ports_allocated=allocated)
    assert decision.action is want.action
    assert decision.backoff_s == pytest.approx(want.backoff_s)
    assert decision.counts is want.counts
    assert decision.fresh_ports is want.fresh_ports
    assert want.reason in decision.reason


@pytest.mark.parametrize("max_restarts", [0, 1, 3])
def test_a_port_that_never_frees_up_ends_in_failure(max_restarts: int) -> None:
    """Fresh ports MAX_PORT_RETRIES times, then the budget; never an endless loop of restarts."""
    restart = RestartSpec(max_restarts=max_restarts)
    history: list[AttemptResult] = []
    fresh = charged = 0
    for _ in range(MAX_PORT_RETRIES + max_restarts + 2):
        history.append(port_clash())
        decision = decide(renumber(history), restart, ports_allocated=True)
        if decision.action is Action.FAIL:
            break
        assert decision.action is Action.RESTART
        fresh += decision.fresh_ports
        charged += decision.counts
    assert decision.action is Action.FAIL, f"still restarting after {len(history)} port clashes"
    assert fresh == MAX_PORT_RETRIES
    assert charged <= max_restarts


def test_restarts_used_counts_failed_attempts_but_not_port_clashes_or_preemptions() -> None:
    assert restarts_used([]) == 0
    assert restarts_used([F(), P(), F(), preempted(), ok()]) == 2
    assert restarts_used([interrupted("SIGINT")]) == 0


# --- failures as data ----------------------------------------------------------------------------


def test_root_cause_is_the_earliest_death_whatever_the_order() -> None:
    late = failure("worker:0", died_at=200.0, observed_at=200.1)
    first = failure("worker:1", died_at=100.0, observed_at=250.0)  # seen last, died first
    middle = failure("chief:0", died_at=150.0, observed_at=150.1)
    for failures in ([late, first, middle], [middle, late, first], [first, middle, late]):
        assert root_cause(failures) is first
    assert root_cause([]) is None


def test_root_cause_tie_goes_to_the_first_observed() -> None:
    a = failure("worker:0", died_at=100.0, observed_at=100.5)
    b = failure("worker:1", died_at=100.0, observed_at=100.2)
    assert root_cause([a, b]) is b


def test_attempt_result_reports_root_cause_first() -> None:
    result = failed(failure("worker:0", 200.0), failure("worker:1", 100.0, exit_code=3))
    data = result.to_dict()
    json.dumps(data)
    assert data["root_cause"]["task"] == "worker:1"
    assert data["root_cause"]["exit_code"] == 3
    assert [f["task"] for f in data["failures"]] == ["worker:1", "worker:0"]
    assert data["status"] == "failed"


@pytest.mark.parametrize(
    ("fields", "code"),
    [
        pytest.param({"exit_code": 3}, 3, id="exit-code"),
        pytest.param({"exit_code": 1}, 1, id="exit-1"),
        pytest.param({"exit_code": 255}, 255, id="exit-255"),
        pytest.param({"exit_code": None, "signal": "SIGKILL"}, 137, id="sigkill"),
        pytest.param({"exit_code": None, "signal": "SIGTERM"}, 143, id="sigterm"),
        pytest.param({"exit_code": None, "signal": "SIGSEGV"}, 139, id="sigsegv"),
        # worker.agent.process_tree.signal_name names a signal without a Python name "SIG<N>"
        pytest.param({"exit_code": None, "signal": "SIG40"}, 168, id="unnamed-signal"),
        pytest.param({"exit_code": None, "signal": "SIGNOPE"}, 1, id="unknown-signal"),
        pytest.param({"exit_code": None}, 1, id="nothing"),
        pytest.param({"exit_code": 0}, 1, id="exit-0-is-still-a-failure"),
    ],
)
def test_job_exit_code(fields: dict[str, Any], code: int) -> None:
    assert failure(kind=FailureKind.EXITED, **fields).job_exit_code == code


TRACEBACK = """Traceback (most recent call last):
  File "train.py", line 10, in <module>
    main()
  File "train.py", line 7, in main
    raise RuntimeError("loss is nan")
RuntimeError: loss is nan
"""


def test_format_report_puts_the_root_cause_first_with_its_traceback() -> None:
    cause = failure("worker:1", died_at=100.0, exit_code=1, traceback=TRACEBACK,
                    stderr_tail=("noise from stderr",))
    later = failure("chief:0", died_at=101.0, exit_code=None, signal="SIGABRT",
                    stderr_tail=("collective op failed",))
    report = format_report([later, cause], job="digits")
    lines = report.splitlines()
    assert "Root cause" in lines[0]
    assert "worker:1" in lines[0]
    assert "chief:0" not in lines[0]
    assert "exited with code 1" in lines[0]
    assert lines[1].endswith("| RuntimeError: loss is nan")  # the exception first
    assert lines[2].endswith("| Traceback (most recent call last):")  # then the frames
    assert "noise from stderr" not in report  # the traceback is the evidence, not stderr
    chief_line = next(i for i, line in enumerate(lines) if "chief:0" in line)
    assert chief_line > next(i for i, line in enumerate(lines) if "loss is nan" in line)
    assert "SIGABRT" in lines[chief_line]


def test_format_report_falls_back_to_the_stderr_tail() -> None:
    tail = tuple(f"stderr line {i}" for i in range(40))
    cause = failure("worker:0", died_at=50.0, exit_code=None, signal="SIGKILL", stderr_tail=tail)
    report = format_report([cause], job="digits")
    lines = report.splitlines()
    assert "worker:0" in lines[0] and "SIGKILL" in lines[0]
    evidence = [line.split("| ", 1)[1] for line in lines[1:]]
    assert evidence[-10:] == [f"stderr line {i}" for i in range(30, 40)]  # the tail, in order
    assert "stderr line 0" not in evidence
    assert "Other failures" not in report


def test_format_report_without_failures() -> None:
    assert "digits" in format_report([], job="digits")


def test_port_conflict_headline_says_so() -> None:
    text = failure("worker:1", kind=FailureKind.PORT_CONFLICT).headline()
    assert "worker:1" in text and "port" in text


@pytest.mark.parametrize(
    ("stderr_tail", "traceback", "expected"),
    [
        pytest.param(("2024-05-01 10:00:00.1: E tensorflow/core/distributed_runtime/rpc/"
                      "grpc_server_lib.cc:475] UNKNOWN: Could not start gRPC server",), None, True,
                     id="tf-log-line"),
        pytest.param((), "Traceback (most recent call last):\n  ...\n"
                     "tensorflow.python.framework.errors_impl.UnknownError: Could not start gRPC "
                     "server\n", True, id="python-traceback"),
        pytest.param(("some line", "UnknownError: Could not start gRPC server", "after"), None, True,
                     id="middle-of-tail"),
        pytest.param(("RuntimeError: loss is nan",), TRACEBACK, False, id="other-error"),
        pytest.param((), None, False, id="nothing"),
    ],
)
def test_is_port_conflict(stderr_tail: tuple[str, ...], traceback: str | None,
                          expected: bool) -> None:
    assert is_port_conflict(stderr_tail, traceback) is expected
