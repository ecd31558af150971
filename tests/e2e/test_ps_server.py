"""Real TensorFlow: ``python -m worker.server``, tfcluster's server for the ``worker`` and ``ps``
tasks of a ParameterServerStrategy job, on its own (no coordinator, no tfcluster run).

Started as tfcluster starts a task (the bootstrap, a report pipe), as ``ps:0`` of a
1-chief/1-worker/1-ps cluster on free local ports: it reports ``ready`` once, its port accepts a
connection, and a SIGTERM ends it with exit code 0 at once. Without a TF_CONFIG naming a worker or
a parameter server it exits 2 with one line, before importing TensorFlow.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import closing, contextmanager

import pytest

from tests.e2e.tfjobs import requires_tf
from tests.support.jobs import REPO
from worker.wire.module_start import module_argv

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(120), requires_tf]

#: TensorFlow's import and the server's start take ~5 s on an idle machine.
START_DEADLINE_S = 60.0
#: How long a SIGTERM'd server may take to exit ("at once": it is well under a second).
STOP_DEADLINE_S = 5.0


def free_ports(count: int) -> list[int]:
    """``count`` distinct ports that were free on 127.0.0.1 a moment ago."""
    sockets = [socket.socket() for _ in range(count)]
    try:
        for sock in sockets:
            sock.bind(("127.0.0.1", 0))
        return [sock.getsockname()[1] for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


def tf_config(task_type: str, ports: list[int]) -> str:
    chief, worker, ps = (f"127.0.0.1:{port}" for port in ports)
    return json.dumps({"cluster": {"chief": [chief], "worker": [worker], "ps": [ps]},
                       "task": {"type": task_type, "index": 0}})


@contextmanager
def server(environ: dict[str, str], *entry: str, pass_fds: tuple[int, ...] = ()
           ) -> Iterator[subprocess.Popen[str]]:
    """``python -m worker.server`` (or ``entry``, started as tfcluster starts its modules) in the
    repository, stdout and stderr captured; killed on the way out whatever happened."""
    argv = module_argv(sys.executable, *(entry or ("worker.server",)))
    inherited = {name: value for name, value in os.environ.items()
                 if name != "TF_CONFIG" and not name.startswith("TFCLUSTER_")}
    proc = subprocess.Popen(argv, cwd=REPO, env={**inherited, **environ}, text=True,
                            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, pass_fds=pass_fds)
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.communicate(timeout=30)


def wait_until_accepting(proc: subprocess.Popen[str], port: int, deadline_s: float) -> None:
    """Wait until 127.0.0.1:``port`` accepts a TCP connection, failing if ``proc`` exits first
    or ``deadline_s`` passes."""
    deadline = time.monotonic() + deadline_s
    while True:
        try:
            with closing(socket.create_connection(("127.0.0.1", port), timeout=1.0)):
                return
        except OSError:
            pass
        if proc.poll() is not None:
            _, stderr = proc.communicate()
            pytest.fail(f"the server exited {proc.returncode} before serving:\n{stderr}")
        if time.monotonic() > deadline:
            pytest.fail(f"port {port} accepted no connection within {deadline_s}s")
        time.sleep(0.05)  # a poll interval, not a synchronisation: the deadline bounds it


def reports(read_fd: int) -> list[dict[str, object]]:
    """Every report line written on the pipe (its write end closed everywhere)."""
    with os.fdopen(read_fd, "rb", closefd=False) as pipe:
        return [json.loads(line) for line in pipe.read().splitlines()]


def test_a_ps_task_reports_ready_once_serves_its_port_and_exits_0_on_sigterm() -> None:
    ports = free_ports(3)
    read_fd, write_fd = os.pipe()
    environ = {"TF_CONFIG": tf_config("ps", ports), "TFCLUSTER_REPORT_FD": str(write_fd),
               "PYTHONPATH": str(REPO)}
    try:
        with server(environ, "worker.runtime.bootstrap", "-m", "worker.server",
                    pass_fds=(write_fd,)) as proc:
            os.close(write_fd)
            write_fd = -1
            wait_until_accepting(proc, ports[2], START_DEADLINE_S)
            proc.send_signal(signal.SIGTERM)
            stopped = time.monotonic()
            _, stderr = proc.communicate(timeout=STOP_DEADLINE_S)
            took = time.monotonic() - stopped
        kinds = [report["kind"] for report in reports(read_fd)]
    finally:
        os.close(read_fd)
        if write_fd >= 0:
            os.close(write_fd)
    assert proc.returncode == 0, stderr
    assert took < STOP_DEADLINE_S
    lines = stderr.splitlines()
    assert f"ps:0 serving on 127.0.0.1:{ports[2]} (TensorFlow " in "\n".join(lines), stderr
    assert lines[-1] == "ps:0: stopping (SIGTERM)", stderr
    assert "Traceback" not in stderr
    assert kinds == ["ready"], kinds  # the bootstrap's, not sent twice


@pytest.mark.parametrize(("environ", "why"), [
    ({}, "TF_CONFIG is not set"),
    ({"TF_CONFIG": tf_config("chief", [1, 2, 3])}, "names task chief:0"),
    ({"TF_CONFIG": "{not json"}, "TF_CONFIG is not JSON"),
])
def test_without_a_worker_or_ps_task_in_tf_config_it_exits_2_with_one_line(
        environ: dict[str, str], why: str) -> None:
    with server({"PYTHONPATH": str(REPO), **environ}) as proc:
        stdout, stderr = proc.communicate(timeout=30)
    assert proc.returncode == 2, stderr
    assert stdout == ""
    assert len(stderr.splitlines()) == 1, stderr
    assert stderr.startswith("worker.server: ") and why in stderr, stderr
