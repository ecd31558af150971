"""One task as the agent sees it: the child process, its three pipes and what it has told us.

Whatever the task writes becomes protocol messages, never an exception: output lines are relayed
within the stream's :class:`~worker.agent.output_budget.OutputBudget`, report lines are checked
(:mod:`worker.wire.reports`) and a bad one becomes an ``AgentError``. Reading is bounded, so one
task flooding its pipes cannot keep the agent from the rest of its work: :meth:`TaskProcess.read`
takes at most :data:`READ_CHUNK_BYTES`, and :meth:`TaskProcess.drain` (at the task's exit) at most
what the pipes held, which is everything the task wrote before it died.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import signal
import subprocess
import time
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass

import psutil

from worker.agent import process_tree
from worker.agent.cpu_time import RunQueueWait
from worker.agent.lines import LineBuffer
from worker.agent.oom_evidence import MemoryEvidence
from worker.agent.output_budget import MIB, RATE_BYTES_S, OutputBudget, drop_notice
from worker.wire import env
from worker.wire.module_start import as_module_argv
from worker.wire.protocol import (
    AgentError,
    Exited,
    Message,
    Output,
    Progress,
    TaskLaunch,
    TaskReport,
    TaskUsage,
)
from worker.wire.reports import (
    MAX_REPORT_LINE_BYTES,
    MAX_TRACEBACK_CHARS,
    BadReport,
    FailureReport,
    OtherReport,
    ReportKind,
    StepReport,
    parse_report,
    shorten_middle,
)

STDOUT, STDERR, REPORT = "stdout", "stderr", "report"
#: The control pipe (agent -> task) among a warm spare's pipes handed over to its task.
CONTROL = "control"
#: An output line longer than this is relayed in pieces of this size.
MAX_OUTPUT_LINE_BYTES = 64 * 1024
#: The most the agent reads from one pipe in one turn of its loop.
READ_CHUNK_BYTES = 64 * 1024
#: The exit message carries this many of the task's last stderr lines, each cut at
#: :data:`STDERR_TAIL_LINE_BYTES` (the whole lines are in the task log).
STDERR_TAIL_LINES = 40
STDERR_TAIL_LINE_BYTES = 4 * 1024
MAX_AGENT_ERROR_CHARS = 1000
_EXCERPT_BYTES = 80
_TOO_FAST = f"the task wrote faster than {RATE_BYTES_S / MIB:g} MiB/s"


class SpawnError(Exception):
    """The task could not be started; the message says why."""


@dataclass
class _Pipe:
    stream: str
    lines: LineBuffer
    budget: OutputBudget
    overlong_told: int = 0


class TaskProcess:
    """Starts one task in its own session and owns the read ends of its stdout, stderr and report
    pipes. The agent reaps it (``os.waitpid``) and calls :meth:`mark_exited`."""

    def __init__(self, launch: TaskLaunch, env_overlay: dict[str, str] | None = None) -> None:
        self.launch = launch
        self.env_overlay = launch.env if env_overlay is None else env_overlay
        self.task = launch.task
        self.pid: int | None = None
        self.fds: dict[int, _Pipe] = {}
        self.traceback: str | None = None
        self.stack_dumps = False
        self.exit_status: int | None = None
        self._pipes: list[_Pipe] = []
        self._stderr_tail: deque[bytes] = deque(maxlen=STDERR_TAIL_LINES)
        self._popen: subprocess.Popen[bytes] | None = None
        self._usage: psutil.Process | None = None
        self._waits: RunQueueWait | None = None
        self._control: int | None = None  # the control pipe's write end (worker.wire.control)

    @property
    def running(self) -> bool:
        """Started and not yet reaped: until we reap it, its pid (and group id) are ours alone."""
        return self.pid is not None and self.exit_status is None

    def start(self) -> None:
        """Spawn the task, to die with the agent (``PR_SET_PDEATHSIG``); SpawnError if it cannot be
        started: no such program, a bad cwd, a NUL byte in an argument or the env."""
        if not os.path.isdir(self.launch.cwd):  # said as such, not as the program missing
            raise SpawnError(f"cannot start {self.task}: its workdir {self.launch.cwd} does not "
                             "exist on this host (or is not a directory)")
        pipes = {name: os.pipe() for name in (STDOUT, STDERR, REPORT)}
        report_w = pipes[REPORT][1]
        control_r, control_w = os.pipe()
        child_env = {**env.without_own(os.environ), **self.env_overlay,
                     env.REPORT_FD: str(report_w), env.CONTROL_FD: str(control_r)}
        try:
            argv, preexec_fn = process_tree.dying_with_this_process(
                as_module_argv(self.launch.argv), child_env.get("PATH"), self.launch.cwd)
            self._popen = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=pipes[STDOUT][1],
                stderr=pipes[STDERR][1],
                pass_fds=(report_w, control_r),
                env=child_env,
                cwd=self.launch.cwd,
                start_new_session=True,
                preexec_fn=preexec_fn,  # noqa: PLW1509 - one thread
            )
        except BaseException as exc:
            for read_end, write_end in [*pipes.values(), (control_r, control_w)]:
                os.close(read_end)
                os.close(write_end)
            if isinstance(exc, OSError | ValueError | subprocess.SubprocessError):
                raise SpawnError(f"cannot start {self.launch.argv[0]!r}: {exc}") from exc
            raise
        self.pid = self._popen.pid
        for _, write_end in pipes.values():
            os.close(write_end)
        os.close(control_r)
        self._take_pipes({name: read_end for name, (read_end, _) in pipes.items()}, control_w)

    def adopt(self, popen: subprocess.Popen[bytes], read_ends: Mapping[str, int]) -> None:
        """Take over a process that was started with this task's pipes and has just become this
        task (a warm spare, :meth:`worker.agent.spares.pool.SparePool.launch`): from now on it is as if
        :meth:`start` had started it. ``read_ends`` maps STDOUT, STDERR and REPORT to the read
        ends and CONTROL to the control pipe's write end, which are this object's to close from
        now on."""
        self._popen = popen
        self.pid = popen.pid
        self._take_pipes(read_ends, read_ends.get(CONTROL))

    def _take_pipes(self, read_ends: Mapping[str, int], control_w: int | None) -> None:
        if control_w is not None:
            os.set_blocking(control_w, False)  # a task that never reads cannot block the agent
        self._control = control_w
        now = time.monotonic()
        for name in (STDOUT, STDERR, REPORT):
            read_end = read_ends[name]
            os.set_blocking(read_end, False)
            lines = (LineBuffer(MAX_REPORT_LINE_BYTES, cut=False) if name == REPORT
                     else LineBuffer(MAX_OUTPUT_LINE_BYTES))
            self.fds[read_end] = _Pipe(name, lines, OutputBudget(now))
        self._pipes = list(self.fds.values())

    # --- what the task writes ---------------------------------------------------------------

    def read(self, fd: int) -> tuple[list[Message], list[int]]:
        """One bounded read of one of the task's pipes: (messages to relay, ``[fd]`` at EOF)."""
        messages, _, eof = self._read_chunk(fd)
        return messages, [fd] if eof else []

    def drain(self) -> tuple[list[Message], list[int]]:
        """At the task's exit: what is left in its pipes, (messages, fds now at EOF). Reads at most
        each pipe's capacity, so a grandchild still writing cannot hold the exit back."""
        messages: list[Message] = []
        ended: list[int] = []
        for fd in list(self.fds):
            try:
                left = fcntl.fcntl(fd, fcntl.F_GETPIPE_SZ)
            except OSError:
                left = READ_CHUNK_BYTES
            while left > 0:
                batch, count, eof = self._read_chunk(fd)
                messages.extend(batch)
                if eof:
                    ended.append(fd)
                if eof or not count:
                    break
                left -= count
        return messages, ended

    def notices(self, now: float, force: bool = False) -> list[Message]:
        """Notices of dropped lines that are due (``force``: all of them, at exit); ``now`` is
        ``time.monotonic()``."""
        found: list[Message] = []
        for pipe in self._pipes:
            dropped = pipe.budget.take_dropped(now, force)
            if dropped is not None:  # a report pipe's notice is told on stderr
                stream = STDERR if pipe.stream == REPORT else pipe.stream
                found.append(drop_notice(self.task, stream, source=pipe.stream,
                                         lines=dropped.lines, nbytes=dropped.nbytes,
                                         why=_TOO_FAST))
        return found

    def notice_due_at(self) -> float | None:
        due = [d for d in (p.budget.notice_due_at() for p in self._pipes) if d is not None]
        return min(due, default=None)

    def _read_chunk(self, fd: int) -> tuple[list[Message], int, bool]:
        pipe = self.fds[fd]
        try:
            chunk = os.read(fd, READ_CHUNK_BYTES)
        except BlockingIOError:
            return [], 0, False
        except OSError:
            chunk = b""
        now = time.monotonic()
        lines = pipe.lines.feed(chunk) if chunk else pipe.lines.flush()
        messages = self.notices(now)
        for raw in lines:
            messages.extend(self._line(pipe, raw, now))
        if pipe.lines.overlong > pipe.overlong_told:
            pipe.overlong_told = pipe.lines.overlong
            if pipe.budget.admit(MAX_REPORT_LINE_BYTES, now):
                messages.append(self._error(f"dropped a report line over {MAX_REPORT_LINE_BYTES} "
                                            "bytes"))
        return messages, len(chunk), not chunk

    def _line(self, pipe: _Pipe, raw: bytes, now: float) -> list[Message]:
        if pipe.stream == REPORT:
            return self._report(pipe, raw, now)
        if pipe.stream == STDERR:
            self._stderr_tail.append(raw[:STDERR_TAIL_LINE_BYTES])
        if not pipe.budget.admit(len(raw) + 1, now):
            return []
        return [Output(task=self.task, stream=pipe.stream, line=_text(raw))]

    def _report(self, pipe: _Pipe, raw: bytes, now: float) -> list[Message]:
        try:
            report = parse_report(raw)
        except BadReport as exc:
            if not pipe.budget.admit(len(raw) + 1, now):
                return []
            return [self._error(f"bad report line ({exc}): {raw[:_EXCERPT_BYTES]!r}")]
        if isinstance(report, FailureReport):  # travels with the exit message
            self.traceback = shorten_middle(report.traceback, MAX_TRACEBACK_CHARS)
            return []
        if isinstance(report, OtherReport) and report.kind == ReportKind.READY:
            self.stack_dumps = report.data.get("stack_dumps") is True
        if not pipe.budget.admit(len(raw) + 1, now):
            return []
        if isinstance(report, StepReport):
            return [Progress(task=self.task, step=report.step, ts=time.time(),
                             metrics=report.metrics, dropped_metrics=report.dropped_metrics)]
        return [TaskReport(task=self.task, kind=report.kind, ts=time.time(), data=report.data)]

    def _error(self, text: str) -> AgentError:
        return AgentError(message=f"{self.task}: {text}"[:MAX_AGENT_ERROR_CHARS])

    # --- its life ---------------------------------------------------------------------------

    def mark_exited(self, status: int) -> None:
        self.exit_status = status
        if self._popen is not None:
            # We reaped it ourselves; keep Popen from waiting on a pid that may be reused.
            self._popen.returncode = os.waitstatus_to_exitcode(status)

    def exited(self, status: int, ts: float, peak_rss_bytes: int | None = None,
               memory: MemoryEvidence | None = None) -> Exited:
        """The exit message for wait status ``status``, reaped at ``ts``; ``memory``: what the
        kernel said of a SIGKILL (:mod:`worker.agent.oom_evidence`)."""
        code = os.waitstatus_to_exitcode(status)
        return Exited(
            task=self.task,
            ts=ts,
            exit_code=code if code >= 0 else None,
            signal=process_tree.signal_name(-code) if code < 0 else None,
            traceback=self.traceback,
            stderr_tail=[_text(raw) for raw in self._stderr_tail],
            peak_rss_bytes=peak_rss_bytes,
            oom_killed=None if memory is None else memory.oom_killed,
            memory_limit_bytes=None if memory is None else memory.limit_bytes,
        )

    def send_signal(self, sig: signal.Signals) -> None:
        """Signal the task's main process, only while it is :attr:`running`."""
        if self.running and self.pid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, sig)

    def signal_group(self, sig: signal.Signals) -> None:
        """Signal the task's process group, only while it is :attr:`running`: once reaped, its
        id may name a stranger's group."""
        if self.running and self.pid is not None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.pid, sig)

    def usage(self) -> TaskUsage | None:
        """CPU percent since the last call, RSS, CPU time and run-queue wait of the task's main
        process, sampled only while it is :attr:`running` (so its pid names no one else)."""
        if not self.running or self.pid is None:
            return None
        try:
            if self._usage is None:
                self._usage = psutil.Process(self.pid)
                self._waits = RunQueueWait(self.pid)
            with self._usage.oneshot():
                times = self._usage.cpu_times()
                return TaskUsage(pid=self.pid, cpu_percent=self._usage.cpu_percent(None),
                                 rss_bytes=self._usage.memory_info().rss,
                                 cpu_seconds=round(times.user + times.system, 4),
                                 wait_seconds=None if self._waits is None
                                 else _rounded(self._waits.read()))
        except psutil.Error:
            return None

    def close_fd(self, fd: int) -> None:
        self.fds.pop(fd, None)
        with contextlib.suppress(OSError):
            os.close(fd)

    def tell(self, line: bytes) -> str | None:
        """Write one control line to the task (:mod:`worker.wire.control`); why not, if it could
        not be written whole (the task is gone, or has left 64 KiB of lines unread)."""
        if self._control is None or not self.running:
            return f"{self.task} is not running"
        try:
            written = os.write(self._control, line)
        except OSError as exc:  # EPIPE: it closed the read end; EAGAIN: the pipe is full
            return f"cannot tell {self.task}: {exc.strerror}"
        return None if written == len(line) else f"cannot tell {self.task}: its control pipe is full"

    def close(self) -> None:
        for fd in list(self.fds):
            self.close_fd(fd)
        if self._control is not None:
            with contextlib.suppress(OSError):
                os.close(self._control)
            self._control = None
        if self._waits is not None:
            self._waits.close()


def _rounded(seconds: float | None) -> float | None:
    return None if seconds is None else round(seconds, 4)


def _text(raw: bytes) -> str:
    return raw.decode("utf-8", "replace")
