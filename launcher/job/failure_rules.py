"""Which failure rule, if any, decides what follows a failure (pure): the spec's ``restart.rules``
in order (:mod:`launcher.spec.failure_rules`), then tfcluster's built-in rules:

- **do not restart me**: a task that exits :data:`~worker.wire.env.DO_NOT_RESTART_EXIT_CODE` (78,
  handed to every task as ``TFCLUSTER_DO_NOT_RESTART_EXIT_CODE``) fails the job at once;
- **start-up errors no retry can fix**: before any step of the job's first attempt, a root cause
  that is an ``ImportError`` / ``ModuleNotFoundError``, a ``SyntaxError`` (``IndentationError``,
  ``TabError``), a missing entrypoint file, a bad command-line argument (``argparse``'s exit 2
  with its ``usage:`` and ``error:`` lines), or a command that cannot be started (no such file,
  no permission, not an executable) fails the job at once, without backoff.

A rule of the spec that matches the same failure comes first, so it overrides a built-in one
(``{match: {exit_codes: [78]}, action: restart}``). Only the root cause is judged, and never a
start-up port clash or tasks that began at different steps (tfcluster's own cases). The policies
(:mod:`launcher.job.policy`, :mod:`launcher.job.task_policy`) carry the rule's action out and
:func:`rule_reason` says it; tested with tables in ``tests/unit/job/test_failure_rules.py``.
"""

from __future__ import annotations

import dataclasses
import errno
import re
from collections.abc import Sequence

from launcher.run.failures import STORED_TRACEBACK_CHARS, FailureKind, TaskFailure, clip_line, last_lines
from launcher.run.noise import explains_nothing
from launcher.run.outcome import (
    AppliedRule,
    AttemptResult,
    AttemptStatus,
    after_unsaved_preemptions,
)
from launcher.spec.failure_rules import PATTERN_FLAGS, FailureRule, RuleAction, RuleMatch
from worker.wire import env

#: How a built-in rule is named.
BUILT_IN = "built-in"
#: The final exceptions that mean the code could not even be loaded.
LOAD_ERRORS = frozenset({"ModuleNotFoundError", "ImportError", "SyntaxError", "IndentationError",
                         "TabError"})
#: ``errno`` values of a command that cannot be started however often it is tried (transient
#: ones, out of memory or processes, are left to the default policy).
PERMANENT_SPAWN_ERRNOS = (errno.ENOENT, errno.EACCES, errno.ENOEXEC, errno.ENOTDIR, errno.EISDIR)
#: What ``argparse`` exits with for a bad argument (after its ``usage:`` and ``error:`` lines).
ARGPARSE_EXIT_CODE = 2
#: Failures tfcluster handles itself, before any rule: a clash on a port it chose, retried on fresh
#: ports, and tasks that restored different checkpoints.
NOT_JUDGED = frozenset({FailureKind.PORT_CONFLICT, FailureKind.STEP_MISMATCH})
#: Python's words for a script that is not there (``python3 train.py``).
_CANT_OPEN = re.compile(r"can't open file .*\[Errno 2\] No such file or directory")
#: The last line of a traceback: ``ModuleNotFoundError: No module named 'x'`` (or a bare name).
_EXCEPTION = re.compile(r"^([A-Za-z_][\w.]*)(?::\s*(.*))?$")
_ARGPARSE_ERROR = re.compile(r"^\S+: error: ")
#: A reason quotes at most this much of an exception's message or of a pattern.
_QUOTED_CHARS = 160
_PATTERN_CHARS = 60


def failure_text(cause: TaskFailure) -> str:
    """What a rule's ``message`` is searched in: the failure's message, the end of its traceback
    and its last lines of stderr."""
    traceback = (cause.traceback or "")[-STORED_TRACEBACK_CHARS:]
    return "\n".join(part for part in (cause.message, traceback, *cause.stderr_tail) if part)


def matched(match: RuleMatch, cause: TaskFailure) -> str | None:
    """What of ``cause`` matched ``match``, in a few words (``exit 75``, ``SIGKILL, message
    /NCCL/``); None if it does not match."""
    said: list[str] = []
    if match.exit_codes is not None or match.signals is not None:
        if cause.exit_code is not None and cause.exit_code in (match.exit_codes or ()):
            said.append(f"exit {cause.exit_code}")
        elif cause.signal is not None and cause.signal in (match.signals or ()):
            said.append(cause.signal)
        else:
            return None
    if match.message is not None:
        if re.search(match.message, failure_text(cause), PATTERN_FLAGS) is None:
            return None
        shown = match.message if len(match.message) <= _PATTERN_CHARS \
            else f"{match.message[:_PATTERN_CHARS]}..."
        said.append(f"message /{shown}/")
    return ", ".join(said)


def final_line(cause: TaskFailure) -> str:
    """The line a failed Python process ends on: its traceback's last, or else the last line of
    its stderr that is not TensorFlow's chatter."""
    if cause.traceback:
        lines = [line for line in last_lines(cause.traceback, 8) if line.strip()]
    else:
        lines = [line for line in cause.stderr_tail if line.strip() and not explains_nothing(line)]
    return lines[-1].strip() if lines else ""


def startup_error(cause: TaskFailure) -> str | None:
    """Which error no retry can fix ``cause`` is, in a few words; None if it is none of them."""
    if cause.kind is FailureKind.SPAWN_FAILED:
        text = cause.message or ""
        if any(f"[Errno {number}]" in text for number in PERMANENT_SPAWN_ERRNOS):
            return f"a command that cannot be started ({clip_line(text, _QUOTED_CHARS)})"
        return None
    if cause.kind is not FailureKind.EXITED:
        return None
    line = final_line(cause)
    exception = _EXCEPTION.match(line)
    name = exception.group(1).rsplit(".", 1)[-1] if exception else ""
    if name in LOAD_ERRORS:
        said = exception.group(2) if exception else None
        return f"{name} ({clip_line(said, _QUOTED_CHARS)})" if said else name
    # runpy could not open the script: a traceback with no frame of the user's code in it
    if name == "FileNotFoundError" and cause.traceback and '  File "' not in cause.traceback:
        return f"a missing entrypoint file ({clip_line(line, _QUOTED_CHARS)})"
    if any(_CANT_OPEN.search(stderr) for stderr in cause.stderr_tail):
        return "a missing entrypoint file (Python: can't open file)"
    if cause.exit_code == ARGPARSE_EXIT_CODE and _ARGPARSE_ERROR.match(line) \
            and any(stderr.startswith("usage:") for stderr in cause.stderr_tail):
        return f"a bad command-line argument ({clip_line(line, _QUOTED_CHARS)})"
    return None


def judge(cause: TaskFailure, rules: Sequence[FailureRule], *,
          before_any_step: bool) -> AppliedRule | None:
    """The rule that decides what follows ``cause``: the first of ``rules`` (the spec's) that
    matches it, else a built-in one, else None (the default policy decides).
    ``before_any_step``: the failure came in the job's first attempt, before any step."""
    if cause.kind in NOT_JUDGED:
        return None
    for index, rule in enumerate(rules):
        what = matched(rule.match, cause)
        if what is not None:
            return AppliedRule(f"restart.rules[{index}]", what, rule.action, rule.exclude_host)
    if cause.exit_code == env.DO_NOT_RESTART_EXIT_CODE and cause.kind is not FailureKind.PREEMPTED:
        return AppliedRule(BUILT_IN, f"exit {cause.exit_code}", RuleAction.FAIL)
    what = startup_error(cause) if before_any_step else None
    if what is not None:
        return AppliedRule(BUILT_IN, what, RuleAction.FAIL, at_start_up=True)
    return None


def before_any_step(result: AttemptResult, earlier: Sequence[AttemptResult]) -> bool:
    """Whether ``result`` is the job's first attempt (those ``earlier`` were start-up port clashes,
    retried on fresh ports) and no task of it reported a step or saved a checkpoint."""
    return (all(past.port_conflict for past in earlier) and result.first_progress_at is None
            and result.max_step is None and result.made_progress is not True)


def judged(result: AttemptResult, earlier: Sequence[AttemptResult],
           rules: Sequence[FailureRule]) -> AttemptResult:
    """``result`` (a finished attempt after ``earlier``) with the rule that matched its root cause
    (:attr:`AttemptResult.rule`) and the unsaved preemptions before it
    (:func:`~launcher.run.outcome.after_unsaved_preemptions`); unchanged if it did not fail, or no
    rule matched."""
    result = after_unsaved_preemptions(result, earlier)
    cause = result.root_cause
    if result.status is not AttemptStatus.FAILED or cause is None or result.gave_up is not None:
        return result
    rule = judge(cause, rules, before_any_step=before_any_step(result, earlier))
    return result if rule is None else dataclasses.replace(result, rule=rule)


def judged_history(history: Sequence[AttemptResult],
                   rules: Sequence[FailureRule]) -> tuple[AttemptResult, ...]:
    """Every attempt of ``history`` :func:`judged` (a resumed run's, read back from its events)."""
    out: list[AttemptResult] = []
    for result in history:
        out.append(judged(result, out, rules))
    return tuple(out)


def rule_reason(rule: AppliedRule, attempt: int | None = None) -> str:
    """What ``rule`` decided, in one line for the console and the events (the budget, when it is
    spent, is the policy's to add); ``attempt``: the attempt it judged, if the job restarts whole."""
    if rule.at_start_up:
        when = "before any step" if attempt is None else f"attempt {attempt}, before any step"
        return (f"{rule.matched} at start-up ({when}): retrying "
                "cannot fix it, so the job is not restarted; fix the script or its environment "
                "and run again (a restart.rules entry that matches it overrides this)")
    if rule.rule == BUILT_IN:
        return (f"the task exited {env.DO_NOT_RESTART_EXIT_CODE}, the exit code with which a task "
                f"asks not to be restarted ({env.DO_NOT_RESTART}): not restarted")
    said = f"{rule.rule} ({rule.matched})"
    if rule.action is RuleAction.FAIL:
        return f"{said}: fail, not restarted"
    if rule.action is RuleAction.RESTART_UNCOUNTED:
        return f"{said}: restart, not counted against restart.max_restarts"
    return said


def host_note(rule: AppliedRule, host: str | None, *, pooled: bool) -> str:
    """What becomes of the failed task's ``host`` under ``rule.exclude_host`` ("" without it)."""
    if not rule.exclude_host or host is None:
        return ""
    if pooled:
        return f"; its host {host} is left out of the next attempt"
    return (f"; its host {host} cannot be left out: the spec names each task's host (a "
            "placement: pool can leave hosts out), so the task runs there again")
