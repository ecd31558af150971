"""Pre-flight: can every host run its part of the job? Every host at once, reported per host.

For each host of the plan, in parallel (Fabric's ``GroupResult``: try every host, then report
each), within the engine's time per host, an engine's :class:`~launcher.preflight.runner.ProbeRunner`
opens the host (SSH: reachable, host key trusted, authenticated) and runs the one probe
(:mod:`launcher.preflight.probe`) where the agent would run. Then the chief's checkpoint dir: on
engines whose hosts each have their own filesystem, the engine checks the chief's host can create
and write it; on engines whose hosts share one, the chief's probe runs first and writes a marker
there, and every other host's probe must read it back (TensorFlow needs the chief's path visible to
all of them, and tfcluster reads it from this machine), which then removes it.

Across hosts, the TensorFlow version must be the same everywhere it is installed. A host that
overruns its time is reported as such and its session closed, so that nothing waits on it.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
import uuid
from collections.abc import Sequence

from launcher.plan.planner import LaunchPlan
from launcher.preflight.answer import parse_answer, read_answer
from launcher.preflight.probe import HostWork, Marker, probe_argv
from launcher.preflight.report import HostReport, PreflightReport, compare_tensorflow
from launcher.preflight.runner import ProbeError, ProbeRunner, ProbeSession

#: Extra time, past a host's own time, before a host still being checked is reported late.
_MARGIN_S = 0.5


def run_preflight(launch_plan: LaunchPlan, runner: ProbeRunner) -> PreflightReport:
    """Check every host of ``launch_plan`` through ``runner``: one report per host, in the plan's
    order. Returns within the runner's ``timeout_s`` plus a small margin (twice that when the
    chief's marker goes first) whatever the hosts do."""
    started = time.monotonic()
    # a plan without tasks probes its hosts alone (a pool's hosts, before they are used)
    chief = launch_plan.chief_host.name if launch_plan.tasks else None
    directory = launch_plan.checkpoint_dir if chief is not None else None
    ports = {h.name: tuple(t.port for t in h.tasks if t.port) for h in launch_plan.hosts}
    reports: dict[str, HostReport] = {}
    if runner.shared_checkpoint_dir and directory is not None and chief is not None:
        marker = Marker("write", directory, uuid.uuid4().hex)
        first = HostWork(launch_plan.chief_host, ports[chief], None, marker)
        reports.update(_probe_all([first], runner))
        read = Marker("read", directory, marker.token)
        written = reports[chief].checkpoint == "ok"
        try:
            reports.update(_probe_all([HostWork(h, ports[h.name], None, read if written else None)
                                       for h in launch_plan.hosts if h.name != chief], runner))
        finally:
            with contextlib.suppress(OSError):
                os.remove(marker.path)
    else:
        reports.update(_probe_all([HostWork(h, ports[h.name], directory if h.name == chief
                                            else None) for h in launch_plan.hosts], runner))
    ordered = [reports[h.name] for h in launch_plan.hosts]
    compare_tensorflow(ordered)
    return PreflightReport(tuple(ordered), time.monotonic() - started, runner.layout)


def _probe_all(work: Sequence[HostWork], runner: ProbeRunner) -> dict[str, HostReport]:
    runs = [_HostRun(w, runner) for w in work]
    for run in runs:
        run.thread.start()
    deadline = time.monotonic() + runner.timeout_s + _MARGIN_S
    for run in runs:
        run.thread.join(max(0.0, deadline - time.monotonic()))
    return {run.work.host.name: run.result() for run in runs}


class _HostRun:
    """One host's checks in a daemon thread; a host that overruns is reported as timed out and its
    session closed."""

    def __init__(self, work: HostWork, runner: ProbeRunner) -> None:
        self.work = work
        self.runner = runner
        self.stage = "starting"
        self.report: HostReport | None = None
        self._session: ProbeSession | None = None
        self._abandoned = False
        self._lock = threading.Lock()
        self.thread = threading.Thread(target=self._run, name=f"preflight-{work.host.name}",
                                       daemon=True)

    def _run(self) -> None:
        host = self.work.host
        report = HostReport(host.name, self.runner.describe(host))
        self.stage = "connecting"
        try:
            session = self.runner.open(host, report)
        except ProbeError as exc:
            report.fail(exc.summary, exc.detail)
            self.report = report
            return
        with self._lock:
            self._session = session
            abandoned = self._abandoned
        try:
            if not abandoned:
                self._check(session, report)
                self.report = report
        finally:
            session.close()

    def _check(self, session: ProbeSession, report: HostReport) -> None:
        self.stage = "probing python"
        try:
            output = session.run(probe_argv(self.work))
        except ProbeError as exc:
            report.fail(exc.summary, exc.detail)
            return
        found = parse_answer(output.stdout)
        if found is None:
            error = session.explain(output)
            report.fail(error.summary, error.detail)
        else:
            read_answer(report, self.work, found, output.workdir)
        if self.work.checkpoint_dir is not None:
            self.stage = "checking the checkpoint dir"
            problem = session.checkpoint_dir_problem(self.work.checkpoint_dir)
            if problem is None:
                report.checkpoint = "ok"
            else:
                report.checkpoint = "NOT WRITABLE"
                report.fail(f"checkpoint dir: {problem}")

    def result(self) -> HostReport:
        """The host's report, or, if it is still being checked, one saying where it was stuck
        (its session is closed: whatever it still does ends)."""
        if self.report is not None:
            return self.report
        with self._lock:
            self._abandoned = True
            session = self._session
        if session is not None:
            session.close()
        host = self.work.host
        report = HostReport(host.name, self.runner.describe(host))
        report.fail(f"no answer within {self.runner.timeout_s:.0f}s ({self.stage})")
        return report
