"""tfcluster's own errors. Every error meant for a user is a :class:`TfclusterError` whose message
is one line (or a few) saying what is wrong and what to do; ``tfcluster`` catches them once, in
:func:`launcher.cli.main.main`, and prints that message instead of a traceback.

This module imports nothing of ``launcher``, so any layer can raise these.
"""

from __future__ import annotations

#: Exit code for a bad spec or bad command-line input (as ``tfcluster validate`` documents).
EXIT_BAD_INPUT = 2
#: Exit code for any other error tfcluster reports itself (a host not ready, a run dir unusable).
EXIT_ERROR = 1


class TfclusterError(Exception):
    """An error with a message for the user; ``exit_code`` is what ``tfcluster`` exits with."""

    exit_code: int = EXIT_ERROR


class UsageError(TfclusterError):
    """Bad input on the command line or in a spec."""

    exit_code = EXIT_BAD_INPUT


class AgentStartError(TfclusterError):
    """The agent for ``host`` could not be started; ``hint`` says what the user can do."""

    def __init__(self, host: str, problem: str, hint: str = "") -> None:
        self.host, self.problem, self.hint = host, problem, hint
        super().__init__(f"{host}: {problem}" + (f" ({hint})" if hint else ""))
