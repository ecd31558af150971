"""Failure rules as tables: what ``restart.rules`` accepts (and the one-line problems it reports),
which rule a root cause matches (the spec's first, then the built-in ones), and when a failure
counts as "before any step" of the job's first attempt."""

from __future__ import annotations

from typing import Any

import pytest

from launcher.job.failure_rules import before_any_step, judge, judged, judged_history, rule_reason
from launcher.run.failures import FailureKind, TaskFailure
from launcher.run.outcome import AttemptResult, AttemptStatus
from launcher.spec.errors import SpecError
from launcher.spec.failure_rules import FailureRule, RuleAction
from launcher.spec.health import RestartSpec
from launcher.spec.loading import spec_from_dict

MODULE_TRACEBACK = ('Traceback (most recent call last):\n  File "/w/train.py", line 3, in <module>\n'
                    "    import nosuchmodule\nModuleNotFoundError: No module named 'nosuchmodule'\n")
IMPORT_NAME = ('Traceback (most recent call last):\n  File "/w/train.py", line 1, in <module>\n'
               "ImportError: cannot import name 'Foo' from 'bar' (/w/bar.py)\n")
# a script with a syntax error has no frame of its own: Python prints the offending line
SYNTAX_STDERR = ('  File "/w/train.py", line 7', "    def step(:", "             ^",
                 "SyntaxError: invalid syntax")
# runpy could not open the script: tfcluster's own frames are hidden, none of the user's is left
MISSING_SCRIPT = ("Traceback (most recent call last):\n"
                  "FileNotFoundError: [Errno 2] No such file or directory: '/w/trian.py'\n")
DATA_FILE_MISSING = ('Traceback (most recent call last):\n  File "/w/train.py", line 9, in <module>\n'
                     "FileNotFoundError: [Errno 2] No such file or directory: '/data/x.csv'\n")
ARGPARSE = ("usage: train.py [-h] [--steps STEPS]",
            "train.py: error: unrecognized arguments: --step 5")
TF_NOISE = "2026-12-05 08:00:00.000000: I tensorflow/core/util/port.cc:153] oneDNN custom " \
           "operations are on."


def failure(kind: FailureKind = FailureKind.EXITED, **fields: Any) -> TaskFailure:
    fields.setdefault("exit_code", 1 if kind is FailureKind.EXITED else None)
    fields["stderr_tail"] = tuple(fields.get("stderr_tail", ()))
    return TaskFailure(task="worker:1", host="h1", attempt=0, kind=kind, died_at=10.0,
                       observed_at=10.01, **fields)


def rules(*entries: dict[str, Any]) -> list[FailureRule]:
    return RestartSpec.model_validate({"rules": list(entries)}).rules


EXIT_75_UNCOUNTED = {"match": {"exit_codes": [75]}, "action": "restart_uncounted"}
NCCL = {"match": {"message": r"^NCCL error", "signals": ["ABRT"]}, "action": "restart",
        "exclude_host": True}
RESTART_78 = {"match": {"exit_codes": [78]}, "action": "restart"}
IMPORT_RESTART = {"match": {"message": "ModuleNotFoundError"}, "action": "restart"}


# (failure, the spec's rules, before any step) -> (rule, a fragment of what matched, action) | None
JUDGEMENTS = [
    pytest.param(failure(exit_code=75), [EXIT_75_UNCOUNTED], False,
                 ("restart.rules[0]", "exit 75", RuleAction.RESTART_UNCOUNTED), id="exit-code"),
    pytest.param(failure(exit_code=1), [EXIT_75_UNCOUNTED], False, None, id="other-exit-code"),
    pytest.param(failure(FailureKind.SIGNALLED, signal="SIGABRT", stderr_tail=["NCCL error: x"]),
                 [EXIT_75_UNCOUNTED, NCCL], False,
                 ("restart.rules[1]", "SIGABRT, message /^NCCL error/", RuleAction.RESTART),
                 id="signal-and-message-second-rule"),
    pytest.param(failure(FailureKind.SIGNALLED, signal="SIGABRT", stderr_tail=["all fine"]),
                 [NCCL], False, None, id="signal-without-the-message"),
    pytest.param(failure(FailureKind.SIGNALLED, signal="SIGKILL", stderr_tail=["NCCL error"]),
                 [NCCL], False, None, id="message-without-the-signal"),
    pytest.param(failure(exit_code=3, traceback="RuntimeError: CUDA error: out of memory"),
                 [{"match": {"message": "CUDA error"}, "action": "fail"}], False,
                 ("restart.rules[0]", "message /CUDA error/", RuleAction.FAIL),
                 id="message-in-the-traceback"),
    pytest.param(failure(FailureKind.HUNG, message="no new step for 120s"),
                 [{"match": {"message": "no new step"}, "action": "restart_uncounted"}], False,
                 ("restart.rules[0]", "message", RuleAction.RESTART_UNCOUNTED),
                 id="message-of-a-hang"),
    pytest.param(failure(FailureKind.PORT_CONFLICT, stderr_tail=["Could not start gRPC server"]),
                 [{"match": {"message": "gRPC"}, "action": "fail"}], True, None,
                 id="port-clash-is-tfclusters-own"),
    # the built-in "do not restart me" exit code, and a spec's rule that overrides it
    pytest.param(failure(exit_code=78), [], False, ("built-in", "exit 78", RuleAction.FAIL),
                 id="do-not-restart"),
    pytest.param(failure(exit_code=78), [RESTART_78], False,
                 ("restart.rules[0]", "exit 78", RuleAction.RESTART), id="do-not-restart-overridden"),
    # the built-in start-up rule: only before any step of the job's first attempt
    pytest.param(failure(traceback=MODULE_TRACEBACK), [], True,
                 ("built-in", "ModuleNotFoundError (No module named 'nosuchmodule')",
                  RuleAction.FAIL), id="module-not-found"),
    pytest.param(failure(traceback=MODULE_TRACEBACK), [], False, None,
                 id="module-not-found-after-a-step"),
    pytest.param(failure(traceback=MODULE_TRACEBACK), [IMPORT_RESTART], True,
                 ("restart.rules[0]", "message /ModuleNotFoundError/", RuleAction.RESTART),
                 id="module-not-found-overridden"),
    pytest.param(failure(traceback=IMPORT_NAME), [], True,
                 ("built-in", "ImportError (cannot import name 'Foo'", RuleAction.FAIL),
                 id="import-error"),
    pytest.param(failure(stderr_tail=[*SYNTAX_STDERR, TF_NOISE]), [], True,
                 ("built-in", "SyntaxError (invalid syntax)", RuleAction.FAIL), id="syntax-error"),
    pytest.param(failure(stderr_tail=["IndentationError: unexpected indent"]), [], True,
                 ("built-in", "IndentationError", RuleAction.FAIL), id="indentation-error"),
    pytest.param(failure(traceback=MISSING_SCRIPT), [], True,
                 ("built-in", "a missing entrypoint file", RuleAction.FAIL),
                 id="entrypoint-script-missing"),
    pytest.param(failure(exit_code=2, stderr_tail=[
                     "python3: can't open file '/w/trian.py': [Errno 2] No such file or directory"]),
                 [], True, ("built-in", "a missing entrypoint file", RuleAction.FAIL),
                 id="python-cant-open-file"),
    pytest.param(failure(traceback=DATA_FILE_MISSING), [], True, None,
                 id="a-data-file-missing-may-appear-later"),
    pytest.param(failure(exit_code=2, stderr_tail=ARGPARSE), [], True,
                 ("built-in", "a bad command-line argument (train.py: error: unrecognized",
                  RuleAction.FAIL), id="argparse"),
    pytest.param(failure(exit_code=1, stderr_tail=ARGPARSE), [], True, None,
                 id="argparse-words-but-not-its-exit-code"),
    pytest.param(failure(FailureKind.SPAWN_FAILED, exit_code=127,
                         message="cannot start 'trian': [Errno 2] No such file or directory"),
                 [], True, ("built-in", "a command that cannot be started", RuleAction.FAIL),
                 id="spawn-enoent"),
    pytest.param(failure(FailureKind.SPAWN_FAILED, exit_code=127,
                         message="cannot start 'python3': [Errno 11] Resource temporarily "
                                 "unavailable"),
                 [], True, None, id="spawn-eagain-may-pass"),
    pytest.param(failure(FailureKind.SIGNALLED, signal="SIGSEGV", traceback=MODULE_TRACEBACK),
                 [], True, None, id="a-crash-is-not-a-start-up-error"),
    pytest.param(failure(exit_code=1, traceback="RuntimeError: boom"), [], True, None,
                 id="an-ordinary-error"),
]


@pytest.mark.parametrize(("cause", "spec_rules", "first", "want"), JUDGEMENTS)
def test_which_rule_decides(cause: TaskFailure, spec_rules: list[dict[str, Any]], first: bool,
                            want: tuple[str, str, RuleAction] | None) -> None:
    rule = judge(cause, rules(*spec_rules), before_any_step=first)
    if want is None:
        assert rule is None
        return
    assert rule is not None
    name, fragment, action = want
    assert (rule.rule, rule.action) == (name, action)
    assert fragment in rule.matched


def test_the_reasons_name_the_rule_and_say_why() -> None:
    start_up = judge(failure(traceback=MODULE_TRACEBACK), [], before_any_step=True)
    assert start_up is not None
    assert rule_reason(start_up, 0) == (
        "ModuleNotFoundError (No module named 'nosuchmodule') at start-up (attempt 0, before "
        "any step): retrying cannot fix it, so the job is not restarted; fix the script or its "
        "environment and run again (a restart.rules entry that matches it overrides this)")
    stop = judge(failure(exit_code=78), [], before_any_step=False)
    assert stop is not None
    assert rule_reason(stop, 3) == ("the task exited 78, the exit code with which a task asks "
                                    "not to be restarted (TFCLUSTER_DO_NOT_RESTART_EXIT_CODE): "
                                    "not restarted")
    uncounted = judge(failure(exit_code=75), rules(EXIT_75_UNCOUNTED), before_any_step=False)
    assert uncounted is not None
    assert rule_reason(uncounted, 1) == ("restart.rules[0] (exit 75): restart, not counted "
                                         "against restart.max_restarts")


def attempt(number: int = 0, *, failures: tuple[TaskFailure, ...] = (), **fields: Any) -> AttemptResult:
    status = AttemptStatus.FAILED if failures else AttemptStatus.SUCCEEDED
    return AttemptResult(attempt=number, status=status, started_at=0.0, ended_at=1.0,
                         failures=failures, **fields)


CRASH = (failure(traceback=MODULE_TRACEBACK),)
CLASH = (failure(FailureKind.PORT_CONFLICT),)


@pytest.mark.parametrize(("result", "earlier", "want"), [
    pytest.param(attempt(failures=CRASH), [], True, id="first-attempt-no-step"),
    pytest.param(attempt(1, failures=CRASH), [attempt(failures=CLASH)], True,
                 id="after-a-port-clash-only"),
    pytest.param(attempt(1, failures=CRASH), [attempt(failures=CRASH)], False,
                 id="second-attempt"),
    pytest.param(attempt(failures=CRASH, first_progress_at=5.0, max_step=1), [], False,
                 id="a-step-was-reported"),
    pytest.param(attempt(failures=CRASH, made_progress=True, checkpoint_step=10), [], False,
                 id="a-checkpoint-was-saved"),
    pytest.param(attempt(failures=CRASH, made_progress=False), [], True,
                 id="checkpoints-but-none-new"),
])
def test_before_any_step(result: AttemptResult, earlier: list[AttemptResult], want: bool) -> None:
    assert before_any_step(result, earlier) is want


def test_only_failed_attempts_are_judged_and_a_resumed_history_is_judged_in_order() -> None:
    assert judged(attempt(), [], []).rule is None
    first = attempt(failures=CRASH)
    again = attempt(1, failures=CRASH)
    history = judged_history([first, again], [])
    assert history[0].rule is not None and history[0].rule.at_start_up
    assert history[1].rule is None  # not the first attempt any more: the default policy decides
    assert history[0].to_dict()["rule"] == {
        "rule": "built-in", "matched": "ModuleNotFoundError (No module named 'nosuchmodule')",
        "action": "fail", "exclude_host": False}


def spec_problems(rule_entries: list[Any], **restart: Any) -> str:
    data = {"name": "r", "entrypoint": {"script": "train.py"}, "tasks": [{"type": "worker"}],
            "restart": {"rules": rule_entries, **restart}}
    with pytest.raises(SpecError) as caught:
        spec_from_dict(data)
    return str(caught.value)


@pytest.mark.parametrize(("entries", "problem"), [
    ([{"match": {"message": "foo("}, "action": "fail"}],
     "restart.rules[0].match.message: not a valid regular expression: missing ), unterminated "
     "subpattern at position 3"),
    ([EXIT_75_UNCOUNTED, {"match": {"signals": ["SIGFOO"]}, "action": "fail"}],
     "restart.rules[1].match.signals[0]: unknown signal 'SIGFOO' (use a name such as SIGKILL"),
    ([{"match": {}, "action": "fail"}],
     "restart.rules[0].match: give at least one of exit_codes, signals or message"),
    ([{"match": {"exit_codes": [0]}, "action": "fail"}],
     "restart.rules[0].match.exit_codes[0]: must be >= 1 (got 0)"),
    ([{"match": {"exit_codes": [3]}, "action": "retry"}],
     "restart.rules[0].action: input should be 'fail', 'restart' or 'restart_uncounted'"),
    ([{"match": {"exit_codes": [3]}, "action": "fail", "exclude_host": True}],
     "restart.rules[0].exclude_host: only with action restart or restart_uncounted"),
    ([{"match": {"exit_codes": [3]}, "action": "fail", "when": "always"}],
     "restart.rules[0].when: unknown field"),
])
def test_a_bad_rule_is_one_line_naming_its_field(entries: list[Any], problem: str) -> None:
    problems = spec_problems(entries)
    assert problem in problems
    assert len(problems.splitlines()) == 1
    assert "Traceback" not in problems


def test_the_do_not_restart_code_cannot_be_a_preemption_code() -> None:
    assert "restart.preemption_exit_codes: must not hold 78" in spec_problems(
        [], preemption_exit_codes=[42, 78])


def test_signal_names_are_taken_as_the_agent_reports_them() -> None:
    rule, = rules({"match": {"signals": ["KILL", "sigsegv", "SIGIOT"]}, "action": "fail"})
    assert rule.match.signals == ["SIGKILL", "SIGSEGV", "SIGABRT"]
    assert judge(failure(FailureKind.SIGNALLED, signal="SIGABRT"), [rule],
                 before_any_step=False) is not None
