"""Reading the probe's answer (:mod:`launcher.preflight.probe`) into a host's report: the same
cells and the same problems whichever engine ran it."""

from __future__ import annotations

import contextlib
import json
from typing import Any

from launcher.preflight.gpus import check_gpus
from launcher.preflight.probe import HostWork
from launcher.preflight.probe_code import MIN_PYTHON, PROBE_TAG
from launcher.preflight.report import HostReport
from worker.wire.version import TFCLUSTER_VERSION


def parse_answer(stdout: bytes) -> dict[str, Any] | None:
    """The probe's tagged JSON line (the last one, if a login shell echoed others), or None."""
    found: dict[str, Any] | None = None
    for line in stdout.decode("utf-8", "replace").splitlines():
        if line.startswith(PROBE_TAG):
            with contextlib.suppress(ValueError):
                value = json.loads(line[len(PROBE_TAG):])
                if isinstance(value, dict):
                    found = value
    return found


def read_answer(report: HostReport, work: HostWork, found: dict[str, Any], workdir: str, *,
                coordinator_version: str = TFCLUSTER_VERSION) -> None:
    """Fill ``report``'s cells from the probe's answer ``found`` on ``work.host`` (run in
    ``workdir``); every problem is named with what to do about it."""
    version = str(found.get("python", "?"))
    report.python = version
    parts = tuple(int(p) for p in version.split(".")[:2] if p.isdigit())
    if parts < MIN_PYTHON:
        report.fail(f"python {version} < {'.'.join(map(str, MIN_PYTHON))}")
    _read_worker(report, work, found, workdir, coordinator_version)
    tf = found.get("tensorflow")
    if tf == "installed":  # found, but no package metadata says its version
        report.tensorflow = "installed"
    elif tf:
        report.tensorflow = report.tensorflow_version = str(tf)
    else:
        report.tensorflow = "MISSING"
        report.fail(f"tensorflow not installed for {work.host.python}",
                    f"{work.host.python} in {workdir} cannot import tensorflow: install it there "
                    "(pip install tensorflow), or set 'python' to an interpreter that has it")
    _read_entrypoints(report, work, found, workdir)
    busy: dict[str, str] = found.get("busy_ports") or {}
    if not work.ports:
        report.ports = "-"
    elif busy:
        report.ports = "IN USE: " + ",".join(sorted(busy, key=int))
        owners = {str(t.port): str(t.task) for t in work.host.tasks if t.port}
        for port, error in sorted(busy.items()):
            owner = f" of {owners[port]}" if port in owners else ""
            report.fail(f"port {port}{owner} in use: {error}")
    else:
        report.ports = f"ok ({len(work.ports)})"
    check_gpus(report, work.host, found)
    if work.marker is not None:
        _read_marker(report, found)


def _read_worker(report: HostReport, work: HostWork, found: dict[str, Any], workdir: str,
                 coordinator_version: str) -> None:
    python = work.host.python
    if "worker_error" in found:
        report.worker = "MISSING"
        report.fail("worker not importable",
                    f"{python} in {workdir} cannot import worker: {found['worker_error']} "
                    "(install tfcluster there or set 'workdir' to a checkout)")
        return
    theirs = found.get("tfcluster")
    if theirs is None:
        report.worker = "NOT TFCLUSTER'S"
        report.fail("worker is not tfcluster's",
                    f"{python} in {workdir} imports 'worker' from {found.get('worker', '?')}, "
                    "which has no __version__: a module of your own named worker shadows "
                    "tfcluster's (rename it), or tfcluster there predates "
                    f"{coordinator_version} (install tfcluster {coordinator_version} there)")
        return
    report.worker = "ok"
    report.tfcluster = str(theirs)
    if theirs != coordinator_version:
        report.tfcluster = f"{theirs} (DIFFERS)"
        report.fail(f"tfcluster {theirs} here but {coordinator_version} on the coordinator",
                    f"{python} in {workdir} has tfcluster {theirs}, the coordinator runs "
                    f"tfcluster {coordinator_version}: install tfcluster {coordinator_version} "
                    "there or set 'workdir' to a checkout of that version")


def _read_entrypoints(report: HostReport, work: HostWork, found: dict[str, Any],
                      workdir: str) -> None:
    """A script that is not there, or a module its interpreter cannot find, for the tasks that
    would run it."""
    missing = found.get("missing_entrypoints")
    for entry in missing if isinstance(missing, list) else ():
        if not isinstance(entry, dict):
            continue
        tasks = ", ".join(str(t) for t in entry.get("tasks") or ())
        if "script" in entry:
            report.fail(f"entrypoint.script {entry['script']}: no such file in {workdir} "
                        f"({tasks})")
        else:
            report.fail(f"entrypoint.module {entry.get('module')}: {work.host.python} in "
                        f"{workdir} cannot find it ({tasks})")


def _read_marker(report: HostReport, found: dict[str, Any]) -> None:
    cell = str(found.get("marker") or "UNKNOWN")
    report.checkpoint = cell
    if cell != "ok":
        report.fail(str(found.get("marker_error") or "the probe did not check the checkpoint dir"))
