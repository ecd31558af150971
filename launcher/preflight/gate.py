"""The check a run of this machine passes before anything starts: the same probe ``tfcluster
preflight`` runs on remote hosts (:mod:`launcher.preflight.group`), its problems said one line each.

A local run launches its first attempt as soon as the spec is valid; without this a script that
is not there, an interpreter that does not exist or has no TensorFlow, or a port another program
holds would be launched, fail, and be restarted up to ``max_restarts`` times. The probe is one
child process of the tasks' interpreter (about 0.1 s): it looks TensorFlow and the tasks' module up
with ``importlib.util.find_spec`` and never imports them.
"""

from __future__ import annotations

from launcher.errors import TfclusterError
from launcher.preflight.report import PreflightReport


class HostsNotReady(TfclusterError):
    """Pre-flight found problems on the hosts of a run that was about to start; nothing started."""

    def __init__(self, job: str, report: PreflightReport) -> None:
        self.job, self.report = job, report
        problems = [f"{host.host}: {line}" for host in report.hosts
                    for line in (*host.problems, *host.details)]
        lines = [*problems, f"job {job} not started: nothing was launched"]
        super().__init__("\ntfcluster: ".join(lines))


def require_ready(job: str, report: PreflightReport) -> None:
    """Raise :class:`HostsNotReady` unless every host of ``report`` is ready."""
    if not report.ok:
        raise HostsNotReady(job, report)
