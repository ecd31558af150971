"""The doctor's conversation with one host: its program (``python -m worker.doctor``) started
through the engine's :class:`~launcher.preflight.runner.ProbeRunner`, exactly where that host's
agent would run (over SSH with its verified host key, as a job step...), then one request at a
time, each answered within its own time.

A reader thread puts each line of the program's output on a queue, so every wait has a deadline:
a host that stops answering is *lost* (:class:`HostLost`, its program closed) and reported, never
waited on. A request the program answers with an error raises :class:`RequestFailed`; the host
goes on.
"""

from __future__ import annotations

import json
import queue
import threading
import time
from typing import Any

from launcher.doctor.targets import Target
from launcher.preflight.report import HostReport
from launcher.preflight.runner import ProbeError, ProbeProcess, ProbeRunner, ProbeSession
from worker.wire.doctor import DOCTOR_MODULE, HELLO, VERSION_FIELD, Op
from worker.wire.module_start import module_argv
from worker.wire.version import TFCLUSTER_VERSION

#: How long the program may take to start and say hello (Python start-up on a busy host).
HELLO_TIMEOUT_S = 20.0
#: After EOF to the program, how long it may take to exit (and its stderr to say why).
_EXIT_WAIT_S = 2.0


class HostLost(ProbeError):
    """The host stopped answering (or never did): ``summary`` is the one line to report."""


class RequestFailed(Exception):
    """The program answered that it could not do what was asked; ``str()`` says why."""


class DoctorHost:
    """One host's program, from :meth:`open` to :meth:`close` (safe more than once, from any
    thread: a host still opening when the others are done is closed from the main thread)."""

    def __init__(self, target: Target, runner: ProbeRunner) -> None:
        self.target = target
        self.runner = runner
        self.report = HostReport(target.name, runner.describe(target.plan))
        self.stage = "starting"
        self.lost: str | None = None
        self._session: ProbeSession | None = None
        self._process: ProbeProcess | None = None
        self._lines: queue.Queue[bytes | None] = queue.Queue()
        self._next_id = 0
        self._lock = threading.Lock()
        self._closed = False

    @property
    def name(self) -> str:
        return self.target.name

    def open(self) -> None:
        """Reach the host and start its program; raises :class:`ProbeError` saying why not."""
        self.stage = "connecting"
        session = self.runner.open(self.target.plan, self.report)
        if not self._keep(session):
            raise HostLost("closed while connecting")
        self.stage = "starting its program"
        process = session.start(module_argv(self.target.plan.python, DOCTOR_MODULE))
        with self._lock:
            self._process = process
            closed = self._closed
        if closed:
            process.close()
            raise HostLost("closed while starting")
        threading.Thread(target=self._read, args=(process,), daemon=True,
                         name=f"doctor-{self.name}").start()
        self.stage = "waiting for its program's hello"
        deadline = time.monotonic() + HELLO_TIMEOUT_S
        while True:  # a login shell may print lines of its own first
            line = self._line(deadline - time.monotonic(), HELLO_TIMEOUT_S)
            if line is None:
                raise self._lose(self._why_ended(session, process))
            hello = _decode(line)
            if hello is not None and hello.get("op") == HELLO:
                break
        theirs = hello.get(VERSION_FIELD)
        if theirs != TFCLUSTER_VERSION:
            raise self._lose(HostLost(
                f"tfcluster {theirs} there, {TFCLUSTER_VERSION} on the coordinator",
                f"install tfcluster {TFCLUSTER_VERSION} on {self.name}, or point the spec's "
                "'python' at an interpreter that has it"))
        self.stage = "measuring"

    def _keep(self, session: ProbeSession) -> bool:
        with self._lock:
            self._session = session
            if not self._closed:
                return True
        session.close()
        return False

    def _read(self, process: ProbeProcess) -> None:
        while line := process.readline():
            self._lines.put(line)
        self._lines.put(None)

    def _line(self, timeout_s: float, whole_s: float) -> bytes | None:
        """The program's next line; None when its output ended; HostLost after ``timeout_s``
        (what is left of the step's ``whole_s``)."""
        try:
            return self._lines.get(timeout=max(timeout_s, 0.0))
        except queue.Empty:
            lost = HostLost(f"no answer within {whole_s:g}s ({self.stage})")
        raise self._lose(lost)

    def _why_ended(self, session: ProbeSession, process: ProbeProcess) -> HostLost:
        output = process.finish(_EXIT_WAIT_S)
        if f"No module named {DOCTOR_MODULE}" in output.stderr.decode("utf-8", "replace"):
            return HostLost(f"tfcluster there is older than {TFCLUSTER_VERSION} (no doctor)",
                            f"{self.target.plan.python} in {output.workdir} has a tfcluster "
                            f"without {DOCTOR_MODULE}: install tfcluster {TFCLUSTER_VERSION} "
                            "there")
        error = session.explain(output)
        return HostLost(error.summary, error.detail)

    def request(self, op: Op, timeout_s: float, **fields: Any) -> dict[str, Any]:
        """The program's answer to ``op``; :class:`RequestFailed` if it could not do it,
        :class:`HostLost` if it does not answer within ``timeout_s``."""
        if self.lost is not None or self._process is None:
            raise HostLost(self.lost or "not started")
        self._next_id += 1
        ident = self._next_id
        self.stage = f"{op.value} request"
        try:
            self._process.write((json.dumps({"id": ident, "op": op.value, **fields}) + "\n")
                                .encode())
        except OSError as exc:
            raise self._lose(HostLost(f"its program is gone ({exc})")) from exc
        deadline = time.monotonic() + timeout_s
        while True:
            line = self._line(deadline - time.monotonic(), timeout_s)
            if line is None:
                raise self._lose(HostLost(f"its program ended during the {op.value} request"))
            answer = _decode(line)
            if answer is None or answer.get("id") != ident:
                continue  # an answer to an earlier request that timed out, or noise
            if not answer.get("ok"):
                raise RequestFailed(str(answer.get("error") or "failed"))
            return answer

    def _lose(self, error: HostLost) -> HostLost:
        self.lost = self.lost or error.summary
        self.close()
        return error

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
            process, session = self._process, self._session
        if process is not None:
            process.finish(0.5 if self.lost is None else 0.0)
            process.close()
        if session is not None:
            session.close()


def _decode(line: bytes) -> dict[str, Any] | None:
    try:
        value = json.loads(line)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None
