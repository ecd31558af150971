"""Failures are data: what failed, where, when, how, and the evidence (traceback, stderr tail).

The earliest failure of an attempt is its root cause and is always reported first, in the spirit of
torchelastic's ``ChildFailedError`` ("Root Cause (first observed failure)").

A failure keeps the evidence as the agent sent it; what is *shown* and *recorded* of it is bounded
and has its secrets masked (:func:`launcher.plan.secrets.redact_text`): :meth:`TaskFailure.evidence`
(the root-cause block on the console) prints at most :data:`EVIDENCE_STDERR_LINES` lines of stderr or
:data:`EVIDENCE_TRACEBACK_LINES` of a traceback, each cut at :data:`EVIDENCE_LINE_CHARS`; and
:meth:`TaskFailure.to_dict` (events, ``summary.json``) stores at most :data:`STORED_TRACEBACK_CHARS`
of the traceback (its end, which holds the exception) and :data:`STORED_STDERR_CHARS` of the stderr
tail. Every cut says how much was left out; the whole text is in the task's log.
"""

from __future__ import annotations

import signal
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from enum import Enum
from typing import Any

from launcher.plan.secrets import redact_text
from launcher.run.excerpt import known_problem, traceback_excerpt
from launcher.run.from_json import RecordError, convert
from launcher.run.noise import explains_nothing
from worker.wire.env import PREEMPTION_EXIT_CODE, TF_RESTART_EXIT_CODE
from worker.wire.protocol import Exited


class FailureKind(str, Enum):
    EXITED = "exited"              # non-zero exit code
    SIGNALLED = "signalled"        # killed by a signal it did not get from tfcluster
    SPAWN_FAILED = "spawn_failed"  # could not be started at all
    PORT_CONFLICT = "port_conflict"  # TF could not bind its gRPC port at start-up
    LOST_HOST = "lost_host"        # its agent / connection went away
    HUNG = "hung"                  # no progress for health.hang_timeout_s
    STARTUP_TIMEOUT = "startup_timeout"  # no first step within health.startup_timeout_s
    PREEMPTED = "preempted"        # exited with a preemption code (42, 143 by default): "restart me"
    RESTORE_FAILED = "restore_failed"  # could not restore the checkpoint it was given
    STEP_MISMATCH = "step_mismatch"  # the tasks of one attempt started from different steps
    SERVER_SILENT = "server_silent"  # a TF server's port stopped answering, its process alive
    OUT_OF_MEMORY = "out_of_memory"  # OOM-killed, killed at memory_limit_mib, or an OOM error


#: Exit codes that mean "saved, restart me" (a graceful preemption) unless the spec's
#: ``restart.preemption_exit_codes`` says otherwise: TensorFlow's PreemptionCheckpointHandler
#: default (42) and 128 + SIGTERM (143).
PREEMPTION_EXIT_CODES = frozenset({TF_RESTART_EXIT_CODE, PREEMPTION_EXIT_CODE})

#: What TensorFlow prints when its gRPC server cannot bind the task's port.
GRPC_BIND_FAILURE = "Could not start gRPC server"

#: The root-cause block shows at most this many (non-noise) lines of stderr...
EVIDENCE_STDERR_LINES = 15
#: ... or this many lines of the traceback (its end: the innermost frames and the exception).
EVIDENCE_TRACEBACK_LINES = 2 * EVIDENCE_STDERR_LINES
#: Each line shown is cut at this many characters.
EVIDENCE_LINE_CHARS = 500
#: ``to_dict`` keeps this many characters of the traceback, from its end.
STORED_TRACEBACK_CHARS = 16 * 1024
#: ``to_dict`` keeps the newest stderr lines up to this many characters in all...
STORED_STDERR_CHARS = 16 * 1024
#: ... each cut at this many, so one huge line does not crowd out the others.
STORED_LINE_CHARS = 2 * 1024
#: ``to_dict`` and the headline keep this many characters of the failure's message.
STORED_MESSAGE_CHARS = 2 * 1024
#: Text this far past a cut is masked along with what is kept, so that a secret that straddles
#: the cut is still recognised.
REDACT_MARGIN_CHARS = 1024
#: How a cut is marked.
ELLIPSIS = "\u2026"


def clip_line(line: str, limit: int) -> str:
    """``line`` with its secrets masked, cut to its first ``limit`` characters (the cut said).
    Only the kept part and a margin are scanned, so a 10 MB line costs no more than a short one."""
    if len(line) <= limit:
        return redact_text(line)
    head = redact_text(line[:limit + REDACT_MARGIN_CHARS])[:limit]
    return f"{head}{ELLIPSIS} [{len(line) - limit} more characters, see the task log]"


def clip_tail(text: str, limit: int) -> str:
    """``text`` with its secrets masked, cut to its last ``limit`` characters (the cut said)."""
    if len(text) <= limit:
        return redact_text(text)
    tail = redact_text(text[-(limit + REDACT_MARGIN_CHARS):])[-limit:]
    return f"{ELLIPSIS} [{len(text) - limit} earlier characters, see the task log]\n{tail}"


def last_lines(text: str, count: int) -> list[str]:
    """The last ``count`` lines of ``text`` (a final newline ends the last line), found from the
    end so that a huge text is not split whole."""
    text = text.rstrip("\n")
    lines: list[str] = []
    end = len(text)
    while end >= 0 and len(lines) < count and text:
        start = text.rfind("\n", 0, end) + 1
        lines.append(text[start:end])
        end = start - 1
    lines.reverse()
    return lines


def clip_lines(lines: Sequence[str], total: int, each: int) -> list[str]:
    """The newest of ``lines`` that fit in ``total`` characters, each :func:`clip_line`-d to
    ``each``; a first line says how many older ones were left out."""
    kept: list[str] = []
    used = 0
    for line in reversed(lines):
        clipped = clip_line(line, each)
        if used + len(clipped) > total:
            break
        kept.append(clipped)
        used += len(clipped)
    kept.reverse()
    left_out = len(lines) - len(kept)
    if left_out:
        kept.insert(0, f"{ELLIPSIS} [{left_out} earlier line(s), see the task log]")
    return kept


def exit_code_for_signal(number: int) -> int:
    """The shell's convention, which ``tfcluster`` follows: death by signal N exits 128 + N."""
    return 128 + number


@dataclass(frozen=True)
class TaskFailure:
    task: str
    host: str
    attempt: int
    kind: FailureKind
    #: When the task died, as its agent saw it (epoch seconds).
    died_at: float
    #: When the coordinator learned of it (epoch seconds).
    observed_at: float
    exit_code: int | None = None
    signal: str | None = None
    traceback: str | None = None
    stderr_tail: tuple[str, ...] = field(default_factory=tuple)
    message: str | None = None

    @property
    def detection_latency_s(self) -> float:
        return max(0.0, self.observed_at - self.died_at)

    @property
    def job_exit_code(self) -> int:
        """What ``tfcluster run`` exits with when this is the root cause."""
        if self.exit_code:
            return self.exit_code
        if self.signal:
            try:
                return exit_code_for_signal(int(signal.Signals[self.signal]))
            except KeyError:
                number = self.signal.removeprefix("SIG")
                return exit_code_for_signal(int(number)) if number.isdigit() else 1
        return 1

    def how(self) -> str:
        """How it failed, in a few words: ``killed by SIGKILL``, ``exited 1``, its message."""
        if self.signal:
            return f"killed by {self.signal}"
        if self.exit_code is not None:
            return f"exited {self.exit_code}"
        return clip_line(self.message or self.kind.value, STORED_MESSAGE_CHARS)

    def headline(self) -> str:
        """One line: which task failed, where, and how (its message masked and bounded)."""
        where = f"{self.task} on {self.host} (attempt {self.attempt})"
        message = None if self.message is None else clip_line(self.message, STORED_MESSAGE_CHARS)
        if self.kind is FailureKind.PREEMPTED:
            # only what the exit code says: whether anything was saved is the policy's to tell
            return (f"{where} exited {self.exit_code}, a preemption exit code "
                    "(restart.preemption_exit_codes): it asks for a restart")
        if self.kind is FailureKind.PORT_CONFLICT:
            return f"{where} could not bind its gRPC port (port taken by another process)"
        if self.kind is FailureKind.OUT_OF_MEMORY and message and \
                message.startswith("ran out of memory"):
            return f"{where} {message}"
        if message and self.exit_code is None and self.signal is None:
            return f"{where}: {message}"
        how = f"was killed by {self.signal}" if self.signal else f"exited with code {self.exit_code}"
        if message:
            how += f": {message}"
        return f"{where} {how}"

    def evidence(self, lines: int = EVIDENCE_STDERR_LINES) -> list[str]:
        """If the script died of an exception, ``2 * lines`` lines of the traceback: the exception
        line first, its message bounded, then the innermost frames
        (:func:`launcher.run.excerpt.traceback_excerpt`); else the last ``lines`` lines of stderr
        without TensorFlow's start-up chatter, which never explains a failure. Each line is masked
        and cut at :data:`EVIDENCE_LINE_CHARS`."""
        if self.traceback:
            chosen = traceback_excerpt(self.traceback, 2 * lines)
        else:
            chosen = [line for line in self.stderr_tail if not explains_nothing(line)][-lines:]
        return [clip_line(line, EVIDENCE_LINE_CHARS) for line in chosen]

    def to_dict(self) -> dict[str, Any]:
        """The failure as recorded in events and ``summary.json``: evidence masked and bounded
        (:data:`STORED_TRACEBACK_CHARS`, :data:`STORED_STDERR_CHARS`, :data:`STORED_MESSAGE_CHARS`)."""
        data = asdict(self)
        data["kind"] = self.kind.value
        data["traceback"] = (None if self.traceback is None
                             else clip_tail(self.traceback, STORED_TRACEBACK_CHARS))
        data["stderr_tail"] = clip_lines(self.stderr_tail, STORED_STDERR_CHARS, STORED_LINE_CHARS)
        data["message"] = (None if self.message is None
                           else clip_line(self.message, STORED_MESSAGE_CHARS))
        data["detection_latency_ms"] = round(self.detection_latency_s * 1000, 3)
        return data

    @classmethod
    def from_dict(cls, record: Mapping[str, Any]) -> TaskFailure:
        """A failure as :meth:`to_dict` recorded it (a ``task_failed`` event, a root cause in
        ``summary.json``), read back. Raises :class:`~launcher.run.from_json.RecordError`."""
        def get(name: str, kind: Any, default: Any = ...) -> Any:
            if name in record:
                return convert(kind, record[name], f"task_failed.{name}")
            if default is ...:
                raise RecordError.missing(f"task_failed.{name}")
            return default

        return cls(
            task=get("task", str), host=get("host", str), attempt=get("attempt", int),
            kind=get("kind", FailureKind), died_at=get("died_at", float),
            observed_at=get("observed_at", float), exit_code=get("exit_code", int | None, None),
            signal=get("signal", str | None, None), traceback=get("traceback", str | None, None),
            stderr_tail=get("stderr_tail", tuple[str, ...], ()),
            message=get("message", str | None, None))


def root_cause(failures: Sequence[TaskFailure]) -> TaskFailure | None:
    """The first failure by the time the task died (ties: first observed)."""
    if not failures:
        return None
    return min(failures, key=lambda f: (f.died_at, f.observed_at))


def is_port_conflict(stderr_tail: Sequence[str], traceback: str | None) -> bool:
    return any(GRPC_BIND_FAILURE in line for line in stderr_tail) or bool(
        traceback and GRPC_BIND_FAILURE in traceback)


def step_mismatch(firsts: dict[str, int], attempt: int, now: float) -> TaskFailure:
    """The tasks of one attempt began at different steps: they restored different checkpoints."""
    listing = ", ".join(f"{task} at step {step}" for task, step in sorted(firsts.items()))
    return TaskFailure(
        task=min(firsts, key=lambda t: firsts[t]), host="-", attempt=attempt,
        kind=FailureKind.STEP_MISMATCH, died_at=now, observed_at=now,
        message=f"the tasks started from different steps ({listing}): each must restore the "
                "same checkpoint (TFCLUSTER_RESUME_CHECKPOINT, or a checkpoint directory every "
                "task can read)")


def classify_exit(message: Exited, *, restore_failed: str | None, reported_steps: bool,
                  preemption_codes: frozenset[int] = PREEMPTION_EXIT_CODES,
                  memory_note: str | None = None,
                  saved_preemption: int | None = None) -> tuple[FailureKind, str | None]:
    """What a task's unexpected exit was, and a note for the report. ``memory_note``: it ran
    out of memory, said how (:func:`launcher.job.memory.out_of_memory`); ``saved_preemption``:
    the step it said it saved at on a preemption notice before it ended."""
    if message.error:
        return FailureKind.SPAWN_FAILED, message.error
    if restore_failed:
        return FailureKind.RESTORE_FAILED, f"could not restore {restore_failed}"
    if message.exit_code in preemption_codes:
        return FailureKind.PREEMPTED, None
    if saved_preemption is not None and message.signal == "SIGTERM":
        return FailureKind.PREEMPTED, (f"it had saved its preemption checkpoint at step "
                                       f"{saved_preemption} when another SIGTERM ended it")
    if not reported_steps and is_port_conflict(message.stderr_tail, message.traceback):
        return FailureKind.PORT_CONFLICT, None
    if memory_note:
        return FailureKind.OUT_OF_MEMORY, memory_note
    return (FailureKind.SIGNALLED if message.signal else FailureKind.EXITED), None


def format_report(failures: Sequence[TaskFailure], job: str) -> str:
    """Human report of an attempt's failures, root cause first."""
    cause = root_cause(failures)
    if cause is None:
        return f"job {job} failed"
    stamp = time.strftime("%H:%M:%S", time.localtime(cause.died_at))
    if cause.kind is FailureKind.PREEMPTED:  # asked for a restart: no crash to explain
        out = [f"Preempted at {stamp}: {cause.headline()}"]
    else:
        evidence = cause.evidence()
        said = "; its last lines of stderr:" if evidence and not cause.traceback else ""
        out = [f"Root cause (first observed failure) at {stamp}: {cause.headline()}{said}"]
        out += [f"  | {line}" for line in evidence]
        if (known := known_problem(cause.traceback, cause.stderr_tail)) is not None:
            out.append(known.say())
    others = [f for f in failures if f is not cause]
    if others:
        out.append("Then:" if cause.kind is FailureKind.PREEMPTED
                   else "Other failures (after the root cause):")
        out += [f"  - {f.headline()}" for f in sorted(others, key=lambda f: f.died_at)]
    return "\n".join(out)
