"""What an engine provides so that pre-flight runs its one probe where the engine's agents run.

Everything else is engine-neutral (:mod:`launcher.preflight.group`): which hosts, which probe,
how its answer reads, the report. An engine only says *how* a command runs on a host (a local
subprocess, a command over an SSH connection, a job step), as Fabric's ``Remote`` overrides only
the transport of a ``Runner``: a :class:`ProbeRunner` opens one :class:`ProbeSession` per host.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from launcher.plan.planner import HostPlan
from launcher.preflight.report import HostReport, Layout


@dataclass(frozen=True)
class ProbeOutput:
    """How the probe ended on a host: its exit status, its output, and the directory it ran in
    (the host's workdir, as the host sees it)."""

    status: int
    stdout: bytes
    stderr: bytes
    workdir: str


class ProbeError(Exception):
    """The probe could not run on a host: ``summary`` for the table's RESULT cell, ``detail``
    (the full explanation and what to do) for the lines under it."""

    def __init__(self, summary: str, detail: str = "") -> None:
        super().__init__(summary)
        self.summary, self.detail = summary, detail


class ProbeProcess(Protocol):
    """A program started on a host by :meth:`ProbeSession.start` (``tfcluster doctor``'s), spoken
    to in lines over its stdin and stdout while it runs."""

    def write(self, data: bytes) -> None:
        """Send ``data`` to its stdin; raises OSError once it is gone."""
        ...

    def readline(self) -> bytes:
        """Its next stdout line; ``b""`` at the end. Blocks: a reader thread calls it."""
        ...

    def finish(self, timeout_s: float) -> ProbeOutput:
        """EOF to its stdin, then up to ``timeout_s`` for it to exit: its exit status (-1 when
        unknown), its stderr so far, and the directory it ran in (``stdout`` is empty: it was
        read through :meth:`readline`)."""
        ...

    def close(self) -> None:
        """End it (kill it, or close its channel); safe more than once, from any thread."""
        ...


class ProbeSession(Protocol):
    """One host's probe, from :meth:`ProbeRunner.open` until :meth:`close`."""

    def run(self, argv: Sequence[str]) -> ProbeOutput:
        """Run ``argv`` (``PYTHON -c PROBE REQUEST``, no shell) in the host's workdir, exactly
        where and as the agent would run, within the runner's ``timeout_s``; raises
        :class:`ProbeError` when it could not be run at all."""
        ...

    def start(self, argv: Sequence[str]) -> ProbeProcess:
        """Start ``argv`` where :meth:`run` would run it, without waiting for its end: its stdin
        and stdout stay open to talk to it (``tfcluster doctor``'s program); raises
        :class:`ProbeError` when it could not be started."""
        ...

    def explain(self, output: ProbeOutput) -> ProbeError:
        """Why the probe ended without its answer (interpreter missing, workdir missing...),
        from its exit status and last stderr lines, in this engine's words."""
        ...

    def checkpoint_dir_problem(self, path: str) -> str | None:
        """Only for engines whose hosts do not share the checkpoint dir: None when the chief
        could create and write ``path`` on this host, else why not."""
        ...

    def close(self) -> None:
        """End whatever is under way (a connection, a child process). Safe to call more than
        once, and from another thread while :meth:`run` waits: pre-flight gives up on a host
        that overruns its time and closes its session."""
        ...


class ProbeRunner(Protocol):
    """How one engine runs the probe on each of its hosts."""

    #: One host's whole budget (connecting, the probe, the checkpoint dir), seconds.
    timeout_s: float
    #: Every host and this coordinator see the checkpoint dir at the same path (a shared
    #: filesystem): instead of :meth:`ProbeSession.checkpoint_dir_problem`, the chief's probe
    #: writes a marker there, every other host's probe must read it back, and the coordinator
    #: removes it.
    shared_checkpoint_dir: bool
    #: How this engine's reports are shown: ``table``, or ``lines`` (one per host).
    layout: Layout

    def describe(self, host: HostPlan) -> str:
        """Where the host is reached, for the table: ``local``, ``user@address:port``...
        Never raises."""
        ...

    def open(self, host: HostPlan, report: HostReport) -> ProbeSession:
        """Get ready to probe ``host`` (e.g. connect); may fill the report's transport cells
        (``connect``) and warnings. Raises :class:`ProbeError` when the host cannot be reached,
        after setting what ``report`` should show."""
        ...
