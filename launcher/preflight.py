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
(:mod:`launcher.preflight_view`); ``ok`` is true when no host has a problem.
"""

from __future__ import annotations

import contextlib
import json
import os
import posixpath
import shlex
import stat
import subprocess
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from launcher.plan import HostPlan, LaunchPlan, plan, ports_to_allocate
from launcher.spec import ClusterSpec
from launcher.ssh_errors import SshError

if TYPE_CHECKING:  # paramiko is imported only when a spec has remote hosts
    from launcher.backends.ssh import SshBackend
    from launcher.ssh_connect import Deadline, SshConnection

#: Lowest Python the worker package supports.
MIN_PYTHON = (3, 10)
#: Extra time, past the per-host deadline, before a host still being checked is reported late.
_MARGIN_S = 0.5
_PROBE_TAG = "TFCLUSTER-PREFLIGHT "

#: Run as ``PYTHON -c PROBE PORT...`` on each host; prints one tagged JSON line. Written for any
#: Python 3 so that an old interpreter is reported rather than failing obscurely.
PROBE = r"""
import json, socket, sys
out = {"python": "%d.%d.%d" % sys.version_info[:3], "executable": sys.executable}
try:
    import worker
    out["worker"] = getattr(worker, "__file__", None) or "?"
except BaseException as exc:
    out["worker_error"] = "%s: %s" % (type(exc).__name__, exc)
try:
    import importlib.metadata as metadata
    for dist in ("tensorflow", "tensorflow-cpu", "tensorflow-macos", "tensorflow-intel"):
        try:
            out["tensorflow"] = metadata.version(dist)
            out["tensorflow_dist"] = dist
            break
        except metadata.PackageNotFoundError:
            pass
except ImportError:
    out["tensorflow_error"] = "importlib.metadata missing"
busy = {}
for text in sys.argv[1:]:
    for family, address in ((socket.AF_INET, "0.0.0.0"), (getattr(socket, "AF_INET6", None), "::")):
        if family is None:
            continue
        try:
            sock = socket.socket(family, socket.SOCK_STREAM)
        except OSError:
            continue
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == getattr(socket, "AF_INET6", None):
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            sock.bind((address, int(text)))
        except OSError as exc:
            busy.setdefault(text, exc.strerror or str(exc))
        finally:
            sock.close()
out["busy_ports"] = busy
print("TFCLUSTER-PREFLIGHT " + json.dumps(out))
"""


@dataclass
class HostReport:
    """What preflight found on one host. Cells are short, for the table; ``details`` carry the
    full explanations printed under it."""

    host: str
    target: str  # "local" or user@address:port
    connect: str = "-"
    python: str = "-"
    worker: str = "-"
    tensorflow: str = "-"
    ports: str = "-"
    checkpoint: str = "-"
    problems: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    details: list[str] = field(default_factory=list)
    tensorflow_version: str | None = None

    @property
    def ok(self) -> bool:
        return not self.problems

    def fail(self, summary: str, detail: str = "") -> None:
        self.problems.append(summary)
        if detail and detail != summary:
            self.details.append(detail)


@dataclass(frozen=True)
class PreflightReport:
    hosts: tuple[HostReport, ...]
    duration_s: float

    @property
    def ok(self) -> bool:
        return all(h.ok for h in self.hosts)


@dataclass(frozen=True)
class PreflightOptions:
    connect_timeout_s: float = 10.0
    accept_new_host_keys: bool = False


@dataclass(frozen=True)
class _Work:
    """One host's checks: its plan, the ports to probe, the checkpoint dir if it is the chief's."""

    host: HostPlan
    ports: tuple[int, ...]
    checkpoint_dir: str | None


# --- the plan's hosts ----------------------------------------------------------------------------


def has_remote_hosts(spec: ClusterSpec) -> bool:
    return any(not spec.is_local(slot.host) for slot in spec.task_slots())


def plan_for_preflight(spec: ClusterSpec, local_python: str, base_dir: str) -> LaunchPlan:
    """The plan ``run`` would make, with port 0 standing for the ports allocated at run time
    (those are local, chosen free when the job starts, and not probed here)."""
    placeholders = dict.fromkeys(ports_to_allocate(spec), 0)
    return plan(spec, attempt=0, run_dir="", ports=placeholders, local_python=local_python,
                base_dir=base_dir)


def _chief_host(launch_plan: LaunchPlan) -> str | None:
    tasks = launch_plan.tasks  # chief first, then workers by index
    return tasks[0].host if tasks else None


def _work(launch_plan: LaunchPlan) -> list[_Work]:
    chief = _chief_host(launch_plan)
    return [_Work(host, tuple(t.port for t in host.tasks if t.port),
                  launch_plan.checkpoint_dir if host.name == chief else None)
            for host in launch_plan.hosts]


# --- running the checks --------------------------------------------------------------------------


def preflight_spec(spec: ClusterSpec, options: PreflightOptions, *, local_python: str,
                   base_dir: str) -> PreflightReport:
    return preflight(plan_for_preflight(spec, local_python, base_dir), options)


def preflight(launch_plan: LaunchPlan, options: PreflightOptions,
              ssh_backend: SshBackend | None = None) -> PreflightReport:
    """Check every host of ``launch_plan`` at once; returns within the connect timeout (plus a
    small margin) whatever the hosts do. ``ssh_backend`` (an SshBackend) resolves remote targets;
    one is made from ``options`` when not given."""
    started = time.monotonic()
    work = _work(launch_plan)
    if ssh_backend is None and any(not w.host.local for w in work):
        from launcher.backends.ssh import SshBackend

        ssh_backend = SshBackend(accept_new_host_keys=options.accept_new_host_keys,
                                 connect_timeout_s=options.connect_timeout_s)
    runs = [_HostRun(w, options, None if w.host.local else ssh_backend) for w in work]
    for run in runs:
        run.thread.start()
    deadline = started + options.connect_timeout_s + _MARGIN_S
    for run in runs:
        run.thread.join(max(0.0, deadline - time.monotonic()))
    reports = [run.result(options.connect_timeout_s) for run in runs]
    _compare_tensorflow(reports)
    return PreflightReport(tuple(reports), time.monotonic() - started)


class _HostRun:
    """One host's checks in a daemon thread; a host that overruns is reported as timed out and its
    connection closed, so that nothing waits on it."""

    def __init__(self, work: _Work, options: PreflightOptions,
                 ssh_backend: SshBackend | None) -> None:
        self.work = work
        self.options = options
        self.ssh_backend = ssh_backend
        self.stage = "starting"
        self.connection: SshConnection | None = None
        self.report: HostReport | None = None
        self.thread = threading.Thread(target=self._run, name=f"preflight-{work.host.name}",
                                       daemon=True)

    def _run(self) -> None:
        if self.ssh_backend is None:
            self.report = _check_local(self.work, self.options.connect_timeout_s,
                                       self._set_stage)
        else:
            self.report = _check_remote(self, self.ssh_backend)

    def _set_stage(self, stage: str) -> None:
        self.stage = stage

    def result(self, timeout_s: float) -> HostReport:
        if self.report is not None:
            return self.report
        if self.connection is not None:
            self.connection.close()
        host = self.work.host
        report = HostReport(host.name, _target_text(self))
        report.fail(f"no answer within {timeout_s:.0f}s ({self.stage})")
        return report


def _target_text(run: _HostRun) -> str:
    host = run.work.host
    if run.ssh_backend is None:
        return "local"
    with contextlib.suppress(SshError):
        return run.ssh_backend.target(host).describe()
    user = f"{host.user}@" if host.user else ""
    return f"{user}{host.address}:{host.ssh_port}"


def _check_remote(run: _HostRun, backend: SshBackend) -> HostReport:
    from launcher.backends.ssh import agent_workdir, remote_path
    from launcher.ssh_connect import Deadline, connect

    work = run.work
    deadline = Deadline(backend.options.timeout_s)
    report = HostReport(work.host.name, _target_text(run))
    run.stage = "connecting"
    try:
        target = backend.target(work.host)
        run.connection = connection = connect(target, backend.options, deadline)
    except SshError as exc:
        report.connect = "FAILED"
        report.fail(exc.summary, exc.detail)
        return report
    try:
        key = connection.host_key
        report.connect = "ok" + (" (key recorded)" if key.recorded_in else "")
        if key.recorded_in:
            report.warnings.append(f"new host key {key.key_type} {key.fingerprint} recorded in "
                                   f"{key.recorded_in}")
        workdir = agent_workdir(work.host)
        run.stage = "probing python"
        command = (f"cd {shlex.quote(workdir)} && exec {shlex.quote(work.host.python)} -c "
                   f"{shlex.quote(PROBE)} {' '.join(str(p) for p in work.ports)}")
        try:
            result = connection.run(command.rstrip(), deadline)
        except SshError as exc:
            report.fail(exc.summary, exc.detail)
            return report
        _read_probe(report, work, workdir, status=result.status, stdout=result.stdout,
                    stderr=result.stderr)
        if work.checkpoint_dir is not None:
            run.stage = "checking the checkpoint dir"
            path = remote_path(work.checkpoint_dir)
            if not posixpath.isabs(path):
                path = posixpath.normpath(posixpath.join(workdir, path))
            problem = _probe_remote_dir(connection, path, deadline)
            _checkpoint_cell(report, path, problem)
        return report
    finally:
        connection.close()


def _check_local(work: _Work, timeout_s: float, set_stage: Callable[[str], None]) -> HostReport:
    report = HostReport(work.host.name, "local")
    workdir = work.host.tasks[0].cwd if work.host.tasks else os.getcwd()
    set_stage("probing python")
    if not os.path.isdir(workdir):
        report.fail(f"workdir missing: {workdir}")
    else:
        try:
            done = subprocess.run([work.host.python, "-c", PROBE, *map(str, work.ports)],
                                  cwd=workdir, capture_output=True, timeout=timeout_s,
                                  check=False, stdin=subprocess.DEVNULL)
        except FileNotFoundError:
            report.fail(f"python not found: {work.host.python}")
        except PermissionError as exc:
            report.fail(f"python not runnable: {work.host.python}", f"{work.host.python}: {exc}")
        except subprocess.TimeoutExpired:
            report.fail(f"python probe took over {timeout_s:.0f}s")
        else:
            _read_probe(report, work, workdir, status=done.returncode, stdout=done.stdout,
                        stderr=done.stderr)
    if work.checkpoint_dir is not None:
        set_stage("checking the checkpoint dir")
        _checkpoint_cell(report, work.checkpoint_dir, _local_dir_problem(work.checkpoint_dir))
    return report


# --- reading results -----------------------------------------------------------------------------


def _read_probe(report: HostReport, work: _Work, workdir: str, *, status: int, stdout: bytes,
                stderr: bytes) -> None:
    found: dict[str, Any] | None = None
    for line in stdout.decode("utf-8", "replace").splitlines():
        if line.startswith(_PROBE_TAG):
            with contextlib.suppress(ValueError):
                found = json.loads(line[len(_PROBE_TAG):])
    if found is None:
        from launcher.backends.ssh import explain_agent_exit

        tail = stderr.decode("utf-8", "replace").strip().splitlines()[-5:]
        error = explain_agent_exit(work.host.name, python=work.host.python, workdir=workdir,
                                   status=status, stderr_tail=tail)
        report.fail(error.summary, error.detail)
        return
    version = str(found.get("python", "?"))
    report.python = version
    parts = tuple(int(p) for p in version.split(".")[:2] if p.isdigit())
    if parts < MIN_PYTHON:
        report.fail(f"python {version} < {'.'.join(map(str, MIN_PYTHON))}")
    if "worker_error" in found:
        report.worker = "MISSING"
        report.fail("worker not importable",
                    f"{work.host.python} in {workdir} cannot import worker: "
                    f"{found['worker_error']} (install tfcluster there or set 'workdir' to a "
                    "checkout)")
    else:
        report.worker = "ok"
    tf = found.get("tensorflow")
    if tf:
        report.tensorflow = report.tensorflow_version = str(tf)
    else:
        report.tensorflow = "not installed"
        report.warnings.append("tensorflow not installed")
    busy: dict[str, str] = found.get("busy_ports") or {}
    if not work.ports:
        report.ports = "-"
    elif busy:
        report.ports = "IN USE: " + ",".join(sorted(busy, key=int))
        report.fail("ports in use: " + ", ".join(f"{p} ({e})" for p, e in sorted(busy.items())))
    else:
        report.ports = f"ok ({len(work.ports)})"


def _checkpoint_cell(report: HostReport, path: str, problem: str | None) -> None:
    if problem is None:
        report.checkpoint = "ok"
    else:
        report.checkpoint = "NOT WRITABLE"
        report.fail(f"checkpoint dir: {problem}")


def _local_dir_problem(path: str) -> str | None:
    """None when the chief could create and write ``path`` (the nearest existing ancestor must be
    a writable directory)."""
    probe = os.path.abspath(path)
    while not os.path.exists(probe):
        parent = os.path.dirname(probe)
        if parent == probe:
            break
        probe = parent
    if not os.path.isdir(probe):
        return f"{probe} is not a directory"
    if not os.access(probe, os.W_OK | os.X_OK):
        return f"{probe} is not writable"
    return None


def _probe_remote_dir(connection: SshConnection, path: str, deadline: Deadline) -> str | None:
    """Over SFTP: create what is missing of ``path``, write and remove a probe file, then remove
    the directories created here. None when all of that worked."""
    created: list[str] = []
    try:
        sftp = connection.transport.open_sftp_client()
    except (OSError, EOFError) as exc:
        return f"SFTP unavailable: {exc}"
    try:
        channel = sftp.get_channel()
        if channel is not None:
            channel.settimeout(max(deadline.left(30.0), 0.1))
        for prefix in _prefixes(path):
            try:
                mode = sftp.stat(prefix).st_mode
            except FileNotFoundError:
                sftp.mkdir(prefix)
                created.append(prefix)
                continue
            if mode is not None and not stat.S_ISDIR(mode):
                return f"{prefix} is not a directory"
        probe = posixpath.join(path, f".tfcluster-preflight-{uuid.uuid4().hex}")
        with sftp.open(probe, "wb") as handle:
            handle.write(b"tfcluster preflight\n")
        sftp.remove(probe)
        return None
    except (OSError, EOFError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        return f"{path} is not writable: {reason or type(exc).__name__}"
    finally:
        for directory in reversed(created):
            with contextlib.suppress(OSError, EOFError):
                sftp.rmdir(directory)
        sftp.close()


def _prefixes(path: str) -> list[str]:
    """``a/b/c`` -> ``a``, ``a/b``, ``a/b/c`` (``/`` kept in front of absolute paths)."""
    parts = [p for p in path.split("/") if p and p != "."]
    lead = "/" if path.startswith("/") else ""
    return [lead + "/".join(parts[: i + 1]) for i in range(len(parts))]


def _compare_tensorflow(reports: list[HostReport]) -> None:
    versions = {r.host: r.tensorflow_version for r in reports if r.tensorflow_version}
    if len(set(versions.values())) <= 1:
        return
    for report in reports:
        mine = versions.get(report.host)
        if mine is None:
            continue
        others = sorted({f"{v} on {h}" for h, v in versions.items() if v != mine})
        report.tensorflow = f"{mine} (DIFFERS)"
        report.fail(f"tensorflow {mine} here but {', '.join(others)}")
