"""``tfcluster preflight SPEC``: can every host run its part of the job? All hosts at once.

For each host of the plan, in parallel, bounded by the connect timeout (one deadline per host):

- remote hosts: reachable, host key trusted (``--accept-new-host-keys`` records a new one),
  authenticated; local hosts need none of that;
- one probe run with the tasks' interpreter in the workdir, exactly where the agent would run
  (``cd WORKDIR && exec PYTHON -c PROBE PORTS``): Python's version, ``worker`` importable, the
  installed TensorFlow distribution's version (read from package metadata, never imported: far too
  slow), and the host's explicit task ports free (bound the way gRPC binds them);
- on the chief's host, the checkpoint directory writable (remote: over SFTP create the missing
  directories, write and remove a probe file, remove what was created; local: ``os.access``).

Across hosts: the TensorFlow version must be the same everywhere it is installed ("not installed"
is only a warning: a job may not use TensorFlow at all). The result is one table
(:mod:`launcher.preflight.view`); ``ok`` is true when no host has a problem. The checks themselves
are in :mod:`launcher.preflight.checks`, the findings in :mod:`launcher.preflight.report`.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from launcher.plan.planner import LaunchPlan
from launcher.preflight.checks import check_local, check_remote, target_text
from launcher.preflight.report import HostReport, HostWork, PreflightReport, compare_tensorflow
from launcher.ssh.deadline import DEFAULT_CONNECT_TIMEOUT_S

if TYPE_CHECKING:  # paramiko is imported only when a spec has remote hosts
    from launcher.ssh.connect import SshConnection
    from launcher.ssh.connector import SshConnector

#: Extra time, past the per-host deadline, before a host still being checked is reported late.
_MARGIN_S = 0.5


@dataclass(frozen=True)
class PreflightOptions:
    connect_timeout_s: float = DEFAULT_CONNECT_TIMEOUT_S
    accept_new_host_keys: bool = False


# --- the plan's hosts ----------------------------------------------------------------------------


def _work(launch_plan: LaunchPlan) -> list[HostWork]:
    chief = launch_plan.chief_host.name
    return [HostWork(host, tuple(t.port for t in host.tasks if t.port),
                     launch_plan.checkpoint_dir if host.name == chief else None)
            for host in launch_plan.hosts]


# --- running the checks --------------------------------------------------------------------------


def preflight(launch_plan: LaunchPlan, options: PreflightOptions,
              connector: SshConnector | None = None) -> PreflightReport:
    """Check every host of ``launch_plan`` at once; returns within the connect timeout (plus a
    small margin) whatever the hosts do. ``connector`` resolves and connects to remote hosts;
    one is made from ``options`` when not given."""
    started = time.monotonic()
    work = _work(launch_plan)
    if connector is None and any(not w.host.local for w in work):
        from launcher.ssh.connector import SshConnector

        connector = SshConnector(accept_new_host_keys=options.accept_new_host_keys,
                                 connect_timeout_s=options.connect_timeout_s)
    runs = [_HostRun(w, options, None if w.host.local else connector) for w in work]
    for run in runs:
        run.thread.start()
    deadline = started + options.connect_timeout_s + _MARGIN_S
    for run in runs:
        run.thread.join(max(0.0, deadline - time.monotonic()))
    reports = [run.result(options.connect_timeout_s) for run in runs]
    compare_tensorflow(reports)
    return PreflightReport(tuple(reports), time.monotonic() - started)


class _HostRun:
    """One host's checks in a daemon thread; a host that overruns is reported as timed out and its
    connection closed, so that nothing waits on it."""

    def __init__(self, work: HostWork, options: PreflightOptions,
                 connector: SshConnector | None) -> None:
        self.work = work
        self.options = options
        self.connector = connector
        self.stage = "starting"
        self.connection: SshConnection | None = None
        self.report: HostReport | None = None
        self.thread = threading.Thread(target=self._run, name=f"preflight-{work.host.name}",
                                       daemon=True)

    def _run(self) -> None:
        if self.connector is None:
            self.report = check_local(self.work, self.options.connect_timeout_s, self)
        else:
            self.report = check_remote(self.work, self.connector, self)

    def result(self, timeout_s: float) -> HostReport:
        if self.report is not None:
            return self.report
        if self.connection is not None:
            self.connection.close()
        host = self.work.host
        report = HostReport(host.name, target_text(host, self.connector))
        report.fail(f"no answer within {timeout_s:.0f}s ({self.stage})")
        return report
