"""The ``entrypoint`` section: what a task runs (``python -m module``, ``python script`` or a
command), for the whole job or, under ``tasks[i].entrypoint``, for one task group."""

from __future__ import annotations

import re
import shlex
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from launcher.spec.limits import PathText, Word, show_text

_MODULE_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*")
#: Each model's validator is built when a spec is first validated (``defer_build``).
_FROZEN = ConfigDict(extra="forbid", frozen=True, defer_build=True)


class EntrypointSpec(BaseModel):
    """What each task runs: exactly one of ``python -m module``, ``python script`` or a command."""

    model_config = _FROZEN

    module: Annotated[Word, Field(min_length=1)] | None = Field(default=None,
        description="Run `python -m MODULE` in every task.")
    script: PathText | None = Field(default=None,
        description="Run `python SCRIPT` in every task (relative to workdir).")
    command: list[Word] | None = Field(default=None,
        description="argv of a program; a string is split with `shlex.split` and never given to a shell.")
    args: list[Word] = Field(default=[], description="Arguments after the module, script or command.")
    preload: list[Annotated[Word, Field(min_length=1)]] = Field(default=["tensorflow"],
        description=("With `restart.warm_spares`: modules each spare imports before it waits for the next "
                     "attempt's launch (a Python entrypoint only; a command always starts cold)."))

    @field_validator("preload")
    @classmethod
    def _preload_names(cls, value: list[str]) -> list[str]:
        bad = [name for name in value if not _MODULE_NAME.fullmatch(name)]
        if bad:
            raise ValueError(f"not Python module names: {', '.join(show_text(b) for b in bad)}")
        return value

    @field_validator("module")
    @classmethod
    def _module_name(cls, value: str | None) -> str | None:
        if value is not None and not _MODULE_NAME.fullmatch(value):
            raise ValueError(f"not a Python module name (got {show_text(value)})")
        return value

    @field_validator("command", mode="before")
    @classmethod
    def _split_command(cls, value: object) -> object:
        if isinstance(value, str):
            try:
                value = shlex.split(value)
            except ValueError as exc:
                raise ValueError(f"cannot split into arguments: {exc}") from None
        if isinstance(value, list) and not value:
            raise ValueError("must not be empty")
        return value

    @model_validator(mode="after")
    def _exactly_one(self) -> EntrypointSpec:
        given = [k for k in ("module", "script", "command") if getattr(self, k) is not None]
        if len(given) != 1:
            got = " and ".join(given) if given else "none"
            raise ValueError(f"give exactly one of module, script, command (got {got})")
        return self
