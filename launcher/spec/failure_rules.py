"""The spec's ``restart.rules``: what to do when the root cause of a failure looks a certain way.

Each rule names what it matches (the exit code or the signal the task ended with, and/or a regular
expression searched in its message, traceback and last lines of stderr) and what to do then: fail
the job at once, restart it (counted against ``restart.max_restarts``, as by default), or restart it
without counting. The rules are checked in order, the first that matches decides, before tfcluster's
built-in rules and its default policy (:mod:`launcher.job.failure_rules` applies them). Everything
wrong in a rule (a bad regular expression, an unknown signal) is a spec problem naming its field.
"""

from __future__ import annotations

import re
import signal
from enum import Enum
from typing import Annotated

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, model_validator

from launcher.spec.errors import FieldProblems

#: Like every section's models: unknown fields rejected, immutable, validators built on first use.
_FROZEN = ConfigDict(extra="forbid", frozen=True, defer_build=True)
#: The longest regular expression a rule may hold (it is searched in every failure's text).
MAX_PATTERN_CHARS = 1000
#: What ``re`` is asked: ``^`` and ``$`` match at each line of the text.
PATTERN_FLAGS = re.MULTILINE


class RuleAction(str, Enum):
    FAIL = "fail"  # the job fails now, without backoff
    RESTART = "restart"  # restart, counted against restart.max_restarts (the default policy's)
    RESTART_UNCOUNTED = "restart_uncounted"  # restart, not counted (backs off after the first)


def signal_name(value: str) -> str:
    """``value`` as the agent reports a signal (``SIGKILL``): ``KILL``, ``sigkill`` and
    ``SIGKILL`` all name it. Raises ``ValueError`` for a name Linux does not have."""
    name = value.strip().upper()
    name = name if name.startswith("SIG") else f"SIG{name}"
    try:
        return signal.Signals[name].name
    except KeyError:
        raise ValueError(f"unknown signal {value!r} (use a name such as SIGKILL, SIGSEGV or "
                         "SIGABRT)") from None


def checked_pattern(value: str) -> str:
    """``value`` if it is a regular expression Python's ``re`` compiles, else ``ValueError``."""
    try:
        re.compile(value, PATTERN_FLAGS)
    except re.error as exc:
        raise ValueError(f"not a valid regular expression: {exc}") from None
    return value


RuleExitCode = Annotated[int, Field(strict=True, ge=1, le=255)]
SignalName = Annotated[str, Field(strict=True, min_length=1), AfterValidator(signal_name)]
Pattern = Annotated[str, Field(strict=True, min_length=1, max_length=MAX_PATTERN_CHARS),
                    AfterValidator(checked_pattern)]


class RuleMatch(BaseModel):
    """What a failure must look like for its rule to apply: it ended with one of ``exit_codes``
    or ``signals`` (when either is given), and ``message`` is found in its text (when given)."""

    model_config = _FROZEN

    exit_codes: Annotated[list[RuleExitCode], Field(min_length=1)] | None = Field(default=None,
        description="Exit codes (1-255): the root cause ended with one of them.")
    signals: Annotated[list[SignalName], Field(min_length=1)] | None = Field(default=None,
        description="Signal names (`SIGKILL`, or `KILL`).")
    message: Pattern | None = Field(default=None,
        description=("A Python regular expression searched (`re.search`, multi-line) in the failure's "
                     "message, traceback and last lines of stderr."))

    @model_validator(mode="after")
    def _says_something(self) -> RuleMatch:
        if self.exit_codes is None and self.signals is None and self.message is None:
            raise FieldProblems([("", "give at least one of exit_codes, signals or message")])
        return self


class FailureRule(BaseModel):
    """One entry of ``restart.rules``."""

    model_config = _FROZEN

    match: RuleMatch = Field(description="What the failure must look like (every part given must hold).")
    action: RuleAction = Field(
        description="fail (the job fails now), restart (counted against max_restarts) or restart_uncounted.")
    exclude_host: Annotated[bool, Field(strict=True)] = Field(default=False,
        description="Leave the failed task's host out of the next attempt (jobs placed from a pool only).")

    @model_validator(mode="after")
    def _exclusion_needs_a_restart(self) -> FailureRule:
        if self.exclude_host and self.action is RuleAction.FAIL:
            raise FieldProblems([("exclude_host", "only with action restart or "
                                  "restart_uncounted: a failed job has no next attempt")])
        return self
