"""``tfcluster local``'s console: its user gave flags, not a spec, so tfcluster's lines name the
flags (``--max-restarts 0``), never the spec fields they stand for (``restart.max_restarts``)."""

from __future__ import annotations

import re

from launcher.output.console import Console

#: A spec field as tfcluster's lines say it -> the ``tfcluster local`` flag that sets it.
_FLAGS = (
    (re.compile(r"restart\.max_restarts = (\d+)"), r"--max-restarts \1"),
    (re.compile(r"restart\.max_restarts"), "--max-restarts"),
    (re.compile(r"checkpoint\.dir"), "--checkpoint-dir"),
    (re.compile(r"health\.hang_timeout_s"), "--hang-timeout"),
    (re.compile(r"health\.startup_timeout_s"), "--startup-timeout"),
    (re.compile(r"health\.grace_period_s"), "--grace-period"),
    (re.compile(r"a restart\.rules entry"), "a restart.rules entry in a spec file"),
)


def in_flags(text: str) -> str:
    """``text`` with each spec field ``tfcluster local`` has a flag for named by that flag."""
    for field, flag in _FLAGS:
        text = field.sub(flag, text)
    return text


class FlagConsole(Console):
    """The console of a ``tfcluster local`` run (task output is left as it is)."""

    def say(self, text: str) -> None:
        super().say(in_flags(text))

    def warn(self, text: str) -> None:
        super().warn(in_flags(text))

    def error(self, text: str) -> None:
        super().error(in_flags(text))
