"""The checks preflight runs on one host, remote (over its SSH connection) or local.

One probe, run with the tasks' interpreter in the workdir exactly where the agent would run
(``cd WORKDIR && exec PYTHON -c PROBE PORT...``), reports Python's version, whether ``worker``
imports, the installed TensorFlow distribution's version (from package metadata: importing
TensorFlow would take seconds) and which of the host's task ports are taken (bound the way gRPC
binds them). On the chief's host the checkpoint directory must be writable: remotely, over SFTP,
the missing directories are created, a probe file written and removed, and what was created
removed again; locally ``os.access`` on the nearest existing directory suffices.
"""

from __future__ import annotations

import contextlib
import json
import os
import posixpath
import shlex
import stat
import subprocess
import uuid
from typing import TYPE_CHECKING, Any, Protocol

from launcher.plan.planner import HostPlan
from launcher.preflight.gpus import GPU_PROBE, check_gpus
from launcher.preflight.report import HostReport, HostWork
from launcher.ssh.errors import SshError

if TYPE_CHECKING:  # paramiko is imported only when a spec has remote hosts
    from launcher.ssh.connect import SshConnection
    from launcher.ssh.connector import SshConnector
    from launcher.ssh.deadline import Deadline

#: Lowest Python the worker package supports.
MIN_PYTHON = (3, 10)
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
""" + GPU_PROBE + """
print("TFCLUSTER-PREFLIGHT " + json.dumps(out))
"""




class Progress(Protocol):
    """Where a host's checks are, for a caller that may stop waiting for them."""

    stage: str
    connection: SshConnection | None


def target_text(host: HostPlan, connector: SshConnector | None) -> str:
    """How the table names where a host is reached: ``local`` or ``user@address:port``."""
    if connector is None:
        return "local"
    with contextlib.suppress(SshError):
        return connector.target(host).describe()
    user = f"{host.user}@" if host.user else ""
    return f"{user}{host.address}:{host.ssh_port}"


def check_remote(work: HostWork, connector: SshConnector, progress: Progress) -> HostReport:
    """Connect, probe and (on the chief's host) test the checkpoint dir over SFTP, within the
    connect timeout. ``progress`` learns the stage and the connection, so that a caller that
    gives up on this host can say where it was stuck and close the connection."""
    from launcher.backends.agent_command import agent_workdir, remote_path
    from launcher.ssh.deadline import Deadline

    deadline = Deadline(connector.options.timeout_s)
    report = HostReport(work.host.name, target_text(work.host, connector))
    progress.stage = "connecting"
    try:
        target = connector.target(work.host)
        progress.connection = connection = connector.connect(target, deadline)
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
        progress.stage = "probing python"
        command = (f"cd {shlex.quote(workdir)} && exec {shlex.quote(work.host.python)} -c "
                   f"{shlex.quote(PROBE)} {' '.join(str(p) for p in work.ports)}")
        try:
            result = connection.run(command.rstrip(), deadline)
        except SshError as exc:
            report.fail(exc.summary, exc.detail)
            return report
        read_probe(report, work, workdir, status=result.status, stdout=result.stdout,
                   stderr=result.stderr)
        if work.checkpoint_dir is not None:
            progress.stage = "checking the checkpoint dir"
            path = remote_path(work.checkpoint_dir)
            if not posixpath.isabs(path):
                path = posixpath.normpath(posixpath.join(workdir, path))
            problem = probe_remote_dir(connection, path, deadline)
            _checkpoint_cell(report, problem)
        return report
    finally:
        connection.close()


def check_local(work: HostWork, timeout_s: float, progress: Progress) -> HostReport:
    """The same probe and checkpoint check on this machine, with no SSH."""
    report = HostReport(work.host.name, "local")
    workdir = work.host.tasks[0].cwd if work.host.tasks else os.getcwd()
    progress.stage = "probing python"
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
            read_probe(report, work, workdir, status=done.returncode, stdout=done.stdout,
                       stderr=done.stderr)
    if work.checkpoint_dir is not None:
        progress.stage = "checking the checkpoint dir"
        _checkpoint_cell(report, local_dir_problem(work.checkpoint_dir))
    return report


# --- reading results -----------------------------------------------------------------------------


def read_probe(report: HostReport, work: HostWork, workdir: str, *, status: int, stdout: bytes,
                stderr: bytes) -> None:
    found: dict[str, Any] | None = None
    for line in stdout.decode("utf-8", "replace").splitlines():
        if line.startswith(_PROBE_TAG):
            with contextlib.suppress(ValueError):
                found = json.loads(line[len(_PROBE_TAG):])
    if found is None:
        from launcher.backends.agent_command import explain_agent_exit

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
    check_gpus(report, work.host, found)


def _checkpoint_cell(report: HostReport, problem: str | None) -> None:
    if problem is None:
        report.checkpoint = "ok"
    else:
        report.checkpoint = "NOT WRITABLE"
        report.fail(f"checkpoint dir: {problem}")


def local_dir_problem(path: str) -> str | None:
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


def probe_remote_dir(connection: SshConnection, path: str, deadline: Deadline) -> str | None:
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


