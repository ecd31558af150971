"""The events of a job placed from a host pool (``placement:`` in the spec): where each attempt
runs, when it runs at another size, and which hosts are left out of it or readmitted.

Imported with the package (``launcher/run/__init__.py``), so every reader of ``events.jsonl``
knows them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import ClassVar

from launcher.run.events import Event


@dataclass(frozen=True)
class AttemptPlaced(Event):
    """Where an attempt of a pool job runs: each task's host, its size and the hosts not used."""

    TYPE: ClassVar[str] = "attempt_placed"
    attempt: int
    #: Training tasks (chief + workers) this attempt runs, and how many the spec asks for.
    workers: int
    max_workers: int
    #: Task name -> host.
    placement: Mapping[str, str]
    #: Usable pool hosts standing by (spares).
    spares: Sequence[str]
    #: Hosts left out of this attempt -> why.
    left_out: Mapping[str, str]


@dataclass(frozen=True)
class JobResized(Event):
    """The next attempt runs at another size than the last one."""

    TYPE: ClassVar[str] = "job_resized"
    attempt: int
    workers: int
    previous_workers: int
    max_workers: int
    reason: str


@dataclass(frozen=True)
class HostLeftOut(Event):
    """A pool host is left out of the attempts from ``attempt`` on."""

    TYPE: ClassVar[str] = "host_left_out"
    attempt: int
    host: str
    reason: str
    #: When it is probed again (seconds from now; None: never, the spec has no readmit_after_s).
    readmit_after_s: float | None


@dataclass(frozen=True)
class HostReadmitted(Event):
    """A left-out host probed healthy again: usable from the next attempt on."""

    TYPE: ClassVar[str] = "host_readmitted"
    host: str
    reason: str
