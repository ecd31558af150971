"""Problems with a spec, as data: each with a field path and a message written for a person.

Every way a spec can be wrong ends in one :class:`SpecError` that lists *all* its problems at once,
each with a field path (``tasks[2].port``, ``hosts.node-a.port``, ``name``); no traceback ever
reaches the user for a bad spec.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from launcher.errors import UsageError


@dataclass(frozen=True)
class SpecProblem:
    """One thing wrong with a spec: where (``tasks[2].port``, ``""`` for the file) and what."""

    path: str
    message: str

    def __str__(self) -> str:
        return f"{self.path}: {self.message}" if self.path else self.message


class SpecError(UsageError):
    """A spec could not be loaded; ``str()`` gives one ``SOURCE: PATH: MESSAGE`` line per problem.

    When a problem has no field path (the file is missing, not YAML, ...) its line is
    ``SOURCE: MESSAGE``.
    """

    def __init__(self, source: str, problems: Sequence[SpecProblem]) -> None:
        super().__init__(source, list(problems))
        self.source = source
        self.problems = list(problems)

    def __str__(self) -> str:
        return "\n".join(f"{self.source}: {problem}" for problem in self.problems)


class FieldProblems(ValueError):
    """Raised inside validators for problems whose paths are relative to the model being checked."""

    def __init__(self, problems: Sequence[tuple[str, str]]) -> None:
        super().__init__("; ".join(f"{path}: {message}" for path, message in problems))
        self.problems = list(problems)
