"""One warm spare as the agent holds it: the ``python -m worker.runtime.spare`` child, its channel, and the
read ends of the stdout, stderr and report pipes it was started with (they become the task's).

A spare goes through these states, in this order only (:class:`SpareState`):

- *starting*: started, importing its preloads;
- *ready*: it said so on its channel, with the modules it imported and its RSS; waiting;
- *taken*: handed to the caller by :meth:`worker.agent.spares.pool.SparePool.take`, its launch is next;
- *launched*: it is a task now, its process and pipes are the caller's (:class:`LaunchedSpare`);
- *failed*, from starting, ready or taken: it died, could not import a preload, or refused its
  launch; :attr:`Spare.reason` says which;
- *discarded*, from starting, ready or taken: the pool killed it (a mismatched launch, not ready
  in time, the pool closed).

**Only ever our own.** The process is pinned by a pidfd opened while it was surely our unreaped
child: a signal or a wait through it reaches that very process or nothing, whoever reaped it and
however soon its pid was reused. Where the kernel has no pidfds (before Linux 5.4), the pool signals
and waits by pid only while no one has told it of the spare's reaping
(:meth:`worker.agent.spares.pool.SparePool.reaped`).
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import socket
import subprocess
import time
from collections.abc import Mapping
from dataclasses import dataclass
from enum import Enum

from worker.agent import process_tree
from worker.agent.lines import LineBuffer
from worker.agent.task_process import CONTROL, MAX_AGENT_ERROR_CHARS, REPORT, STDERR, STDOUT
from worker.runtime.spare import SPARE_FD, ChannelError, ChannelKind, decode, encode
from worker.wire import env
from worker.wire.process_identity import read_stat

#: How often a spare that has not answered its launch yet is looked at: a stopped one never will.
STOP_CHECK_S = 0.05
#: How much a spare may say before its launch (one ``ready`` or ``failed`` line).
MAX_CHANNEL_LINE_BYTES = 64 * 1024
_READ_BYTES = 64 * 1024


class SpareState(str, Enum):
    STARTING = "starting"
    READY = "ready"
    TAKEN = "taken"
    LAUNCHED = "launched"
    FAILED = "failed"
    DISCARDED = "discarded"


#: States in which the spare is still the pool's to launch or to kill.
LIVE = frozenset({SpareState.STARTING, SpareState.READY, SpareState.TAKEN})


@dataclass(frozen=True)
class LaunchedSpare:
    """A spare that has become the task ``task``: from now on a task process like any other.

    ``popen`` and the three ``read_ends`` (by stream, the names ``TaskProcess`` uses) are the
    caller's to keep: ``popen`` must stay referenced and get its ``returncode`` when the caller
    reaps ``pid``, or ``subprocess`` may reap the task behind the caller's back."""

    task: str
    pid: int
    popen: subprocess.Popen[bytes]
    read_ends: dict[str, int]
    modules: tuple[str, ...]
    rss_bytes: int | None


def child_environ(overlay: Mapping[str, str], report_fd: int,
                  control_fd: int | None = None) -> dict[str, str]:
    """The whole environment of a task started with env ``overlay``, reporting on ``report_fd``
    and told the job's stop step on ``control_fd``: the agent's own without tfcluster's
    variables, then the overlay (as ``TaskProcess.start``)."""
    control = {} if control_fd is None else {env.CONTROL_FD: str(control_fd)}
    return {**env.without_own(os.environ), **overlay, env.REPORT_FD: str(report_fd), **control}


def describe_status(status: int) -> str:
    code = os.waitstatus_to_exitcode(status)
    return f"exit code {code}" if code >= 0 else f"killed by {process_tree.signal_name(-code)}"


class Spare:
    """One spare process of the pool, for task :attr:`task`. Read its attributes; the pool alone
    changes them."""

    def __init__(self, task: str, popen: subprocess.Popen[bytes], *, channel: socket.socket,
                 read_ends: dict[str, int], report_fd: int, preload: tuple[str, ...]) -> None:
        self.task = task
        self.pid = popen.pid
        self.preload = preload
        self.state = SpareState.STARTING
        self.reason: str | None = None  # why it failed or was discarded
        self.modules: tuple[str, ...] = ()
        self.rss_bytes: int | None = None  # as it said when ready
        self.import_s: float | None = None
        self.import_cpu_s: float | None = None  # the CPU time its imports took
        self.started_at = time.monotonic()
        self.ready_at: float | None = None
        self.exit_status: int | None = None  # wait status, once reaped and known
        self.reaped = False  # by us or the agent: from then on its pid names no one of ours
        self.report_fd = report_fd  # the number of the report pipe's write end in the spare
        self.control_fd: int | None = None  # and of the control pipe's read end
        self._popen = popen
        self._channel: socket.socket | None = channel
        self._lines = LineBuffer(MAX_CHANNEL_LINE_BYTES, cut=False)
        self._read_ends = dict(read_ends)
        self._pidfd: int | None = None
        with contextlib.suppress(AttributeError, OSError):  # no pidfds on this kernel
            self._pidfd = os.pidfd_open(self.pid)

    @classmethod
    def start(cls, task: str, argv: list[str], environ: dict[str, str], cwd: str,
              preload: tuple[str, ...]) -> Spare:
        """Start ``argv`` (``python -m worker.runtime.spare ...``) with the task's pipes, ``environ`` plus
        the channel's fd, in ``cwd``, in its own session and to die with this process, as
        ``TaskProcess.start`` starts a task. OSError / ValueError / SubprocessError if it cannot
        be started."""
        pipes = {name: os.pipe() for name in (STDOUT, STDERR, REPORT)}
        control_r, control_w = os.pipe()  # the other way round: the agent writes
        pipes[CONTROL] = (control_w, control_r)  # (ours, theirs), as for the other pipes
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        report_w = pipes[REPORT][1]
        try:
            popen = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=pipes[STDOUT][1],
                stderr=pipes[STDERR][1],
                pass_fds=(report_w, control_r, theirs.fileno()),
                env={**environ, SPARE_FD: str(theirs.fileno())},
                cwd=cwd,
                start_new_session=True,
                preexec_fn=process_tree.die_with_this_process(),  # noqa: PLW1509 - one thread
            )
        except BaseException:
            ours.close()
            for read_end, _ in pipes.values():
                os.close(read_end)
            raise
        finally:
            theirs.close()
            for _, write_end in pipes.values():
                os.close(write_end)
        ours.setblocking(False)
        read_ends = {name: read_end for name, (read_end, _) in pipes.items()}
        spare = cls(task, popen, channel=ours, read_ends=read_ends, report_fd=report_w,
                    preload=preload)
        spare.control_fd = control_r
        return spare

    # --- its channel --------------------------------------------------------------------------

    @property
    def channel_fd(self) -> int | None:
        return None if self._channel is None else self._channel.fileno()

    def read_channel(self) -> bool:
        """Take what the spare said (non-blocking); True if its state changed."""
        if self._channel is None:
            return False
        try:
            chunk = self._channel.recv(_READ_BYTES)
        except (BlockingIOError, InterruptedError):
            return False
        except OSError:
            chunk = b""
        if not chunk:
            return self.fail("ended before its launch")
        changed = False
        for line in self._lines.feed(chunk):
            changed = self._message(line) or changed
        return changed

    def wait_ready(self, timeout_s: float) -> None:
        """Wait at most ``timeout_s`` for a spare still starting to say it is ready (or failed)."""
        deadline = time.monotonic() + timeout_s
        while self.state is SpareState.STARTING and self._channel is not None:
            left = deadline - time.monotonic()
            if left <= 0:
                return
            readable, _, _ = select.select([self._channel], [], [], left)
            if readable:
                self.read_channel()

    def _message(self, line: bytes) -> bool:
        try:
            kind, fields = decode(line)
        except ChannelError as exc:
            return self.fail(str(exc))
        if kind is ChannelKind.READY and self.state is SpareState.STARTING:
            self.state = SpareState.READY
            self.ready_at = time.monotonic()
            modules = fields.get("modules")
            self.modules = tuple(str(m) for m in modules) if isinstance(modules, list) else ()
            rss, took = fields.get("rss_bytes"), fields.get("import_s")
            self.rss_bytes = rss if isinstance(rss, int) else None
            self.import_s = float(took) if isinstance(took, int | float) else None
            self.import_cpu_s = self.cpu_s()
            return True
        if kind is ChannelKind.FAILED:
            return self.fail(str(fields.get("error", "failed")))
        return self.fail(f"said {kind.value!r} before its launch")

    def launch(self, message: bytes, timeout_s: float) -> tuple[ChannelKind, dict[str, object]]:
        """Send the launch and wait up to ``timeout_s`` for the spare's answer. ChannelError if
        it does not give one in time. After ``launched``, :meth:`start_task` lets it run."""
        if self._channel is None:
            raise ChannelError("its channel is closed")
        deadline = time.monotonic() + timeout_s
        channel = self._channel
        channel.settimeout(timeout_s)
        try:
            channel.sendall(message)
            while True:
                channel.settimeout(min(max(deadline - time.monotonic(), 0.001), STOP_CHECK_S))
                try:
                    chunk = channel.recv(_READ_BYTES)
                except TimeoutError:
                    if self.stopped():
                        raise ChannelError("was stopped (SIGSTOP) before it answered its "
                                           "launch") from None
                    if time.monotonic() < deadline:
                        continue
                    raise
                if not chunk:
                    raise ChannelError("it ended instead of answering its launch")
                lines = self._lines.feed(chunk)
                if lines:
                    return decode(lines[0])
        except TimeoutError as exc:
            raise ChannelError(f"no answer to its launch within {timeout_s:g}s") from exc
        except OSError as exc:
            raise ChannelError(f"its channel failed: {exc}") from exc

    def start_task(self) -> None:
        """Let a spare that took its launch run the task's code. ChannelError if it cannot be
        told (it died meanwhile)."""
        if self._channel is None:
            raise ChannelError("its channel is closed")
        try:
            self._channel.sendall(encode(ChannelKind.START))
        except OSError as exc:
            raise ChannelError(f"its channel failed: {exc}") from exc

    def close_channel(self) -> None:
        """Close our end (after the pool has stopped watching it); safe to call more than once."""
        if self._channel is not None:
            self._channel.close()
            self._channel = None

    # --- its life -----------------------------------------------------------------------------

    def fail(self, reason: str) -> bool:
        """It failed (keep the first reason); True if that changed its state."""
        if self.state not in LIVE:
            return False
        self.state = SpareState.FAILED
        self.reason = reason[:MAX_AGENT_ERROR_CHARS]
        return True

    def why(self) -> str:
        """Why it cannot be used: its reason, with how it ended once known."""
        reason = self.reason or self.state.value
        return reason if self.exit_status is None else f"{reason} ({describe_status(self.exit_status)})"

    def alive(self) -> bool:
        """It has not exited (a pidfd says so at once; without one: until reaped)."""
        if self.reaped:
            return False
        if self._pidfd is None:
            return True
        poller = select.poll()
        poller.register(self._pidfd, select.POLLIN)
        return not poller.poll(0)

    def stopped(self) -> bool:
        """It is stopped (SIGSTOP, SIGTSTP, a debugger): it would answer nothing until continued."""
        stat = read_stat(self.pid) if self.alive() else None
        return stat is not None and stat.state in ("T", "t") and self.alive()

    def kill(self) -> None:
        """SIGKILL the spare, only if it is provably still this process (see the module doc)."""
        if self.reaped:
            return
        with contextlib.suppress(ProcessLookupError, PermissionError):
            if self._pidfd is not None:
                signal.pidfd_send_signal(self._pidfd, signal.SIGKILL)
            else:
                os.kill(self.pid, signal.SIGKILL)

    def try_reap(self) -> bool:
        """Reap it if it has exited (never blocks); True once it is reaped, by us or anyone."""
        if self.reaped:
            return True
        try:
            if self._pidfd is not None:
                result = os.waitid(os.P_PIDFD, self._pidfd, os.WEXITED | os.WNOHANG)
                if result is None:
                    return False
                self.mark_reaped(_wait_status(result))
            else:
                pid, status = os.waitpid(self.pid, os.WNOHANG)
                if pid == 0:
                    return False
                self.mark_reaped(status)
        except ChildProcessError:  # reaped by someone else (the agent's waitpid(-1))
            self.mark_reaped(None)
        return True

    def mark_reaped(self, status: int | None) -> None:
        """The process was reaped with wait status ``status`` (None: unknown, someone else reaped
        it): its pid names no one of ours from now on."""
        self.reaped = True
        self.exit_status = status
        # keep subprocess from ever waiting on that pid (it may be another child's by now)
        self._popen.returncode = -1 if status is None else os.waitstatus_to_exitcode(status)
        if self._pidfd is not None:
            os.close(self._pidfd)
            self._pidfd = None

    @property
    def pidfd(self) -> int | None:
        return self._pidfd

    def rss_now(self) -> int | None:
        """Its resident memory now, read only while it provably is this process."""
        if not self.alive():
            return None
        try:
            with open(f"/proc/{self.pid}/statm", "rb") as statm:
                rss = int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
        except (OSError, ValueError, IndexError):
            return None
        return rss if self.alive() else None

    def cpu_s(self) -> float | None:
        """The CPU time it has had so far (all its threads), read only while it provably is this
        process: how far its imports are, whatever the CPU it had to share."""
        if not self.alive():
            return None
        try:
            with open(f"/proc/{self.pid}/stat", "rb") as stat:
                fields = stat.read().rsplit(b")", 1)[1].split()
            ticks = int(fields[11]) + int(fields[12])  # utime, stime (fields 14, 15 of proc(5))
        except (OSError, ValueError, IndexError):
            return None
        return ticks / os.sysconf("SC_CLK_TCK") if self.alive() else None

    def hand_over(self) -> LaunchedSpare:
        """It is the caller's task now: give up its process and pipes (they are not closed)."""
        self.state = SpareState.LAUNCHED
        self.close_channel()
        if self._pidfd is not None:
            os.close(self._pidfd)
            self._pidfd = None
        read_ends, self._read_ends = self._read_ends, {}
        return LaunchedSpare(task=self.task, pid=self.pid, popen=self._popen, read_ends=read_ends,
                             modules=self.modules, rss_bytes=self.rss_bytes)

    def close_pipes(self) -> None:
        """Close the pipes' read ends it was started with (never once handed over)."""
        for read_end in self._read_ends.values():
            with contextlib.suppress(OSError):
                os.close(read_end)
        self._read_ends = {}


def _wait_status(result: os.waitid_result) -> int:
    """A ``waitid`` result as the wait status ``os.waitpid`` would have given."""
    if result.si_code == os.CLD_EXITED:
        return (result.si_status & 0xFF) << 8
    return result.si_status | (0x80 if result.si_code == os.CLD_DUMPED else 0)

