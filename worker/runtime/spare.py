"""A warm spare: an interpreter that has imported a task's heavy modules and waits for its launch.

``python -m worker.runtime.spare [--preload MOD[,MOD...]] -- ENTRY...`` (through
:mod:`worker.wire.module_start`, as a cold start) is started by the agent's
:class:`~worker.agent.spares.pool.SparePool` with the interpreter, stdout, stderr and report pipes,
cwd and env the task will have (the import-time part of the env exactly,
:mod:`worker.agent.spares.import_env`), plus a channel, a Unix socket named in
``TFCLUSTER_SPARE_FD``. ``ENTRY`` is the entry argv the task
is expected to get (``-m MODULE ARGS...`` or ``SCRIPT ARGS...``): the preloads are imported under
the ``sys.argv`` and ``sys.path`` it gives. Then, one JSON object a line on the channel:

- spare -> pool: ``ready`` (``pid``, ``modules``, ``rss_bytes``, ``import_s``), or ``failed``
  (``error``) and exit 1;
- pool -> spare: ``launch`` (``argv``: the entry argv, ``orig_argv``, ``env``: the whole
  environment, ``cwd``);
- spare -> pool: ``launched``, or ``refused`` (``error``) and exit 127;
- pool -> spare: ``start``, once the pool has taken the answer (anything else, or EOF: exit 127
  without running any of the task's code, so a launch the pool gave up on never runs).

After ``start`` it closes the channel and becomes the task through :func:`worker.runtime.task_entry.run`,
as ``python -m worker.runtime.bootstrap`` does: same ``sys.argv``, ``sys.orig_argv``, ``sys.path``,
``os.environ`` (in the same order, with what the interpreter added at start-up, e.g. a coerced
``LC_CTYPE``), cwd and pipes. EOF instead of a launch ends it quietly (exit 0). It writes nothing on
stdout or stderr, and installs no signal handler: all it keeps of its wait is what its preloads did.
What still shows is outside the interpreter: ``/proc/PID/cmdline`` and ``/proc/PID/environ`` (the
kernel's copy of what the spare was started with), its start time and the CPU its imports took.

This module imports nothing that ``python -m worker.runtime.bootstrap`` does not, so the task finds the
same ``sys.modules`` (plus its preloads).
"""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import sys
import time
from enum import Enum
from typing import Any

from worker.runtime import task_entry

#: Names the spare's end of its channel to the pool.
SPARE_FD = "TFCLUSTER_SPARE_FD"
#: A launch message is refused above this size (the spec bounds argv and env far below it).
MAX_LAUNCH_BYTES = 64 * 1024 * 1024
MAX_ERROR_CHARS = 1000
USAGE = "usage: python -m worker.runtime.spare [--preload MOD[,MOD...]] -- (-m MODULE | SCRIPT) [ARGS...]"
_READ_BYTES = 1024 * 1024


class ChannelKind(str, Enum):
    """The messages on a spare's channel (the one list of them, for both ends)."""

    READY = "ready"  # spare -> pool: preloads imported, waiting
    FAILED = "failed"  # spare -> pool: a preload could not be imported; it exits
    LAUNCH = "launch"  # pool -> spare: become this task
    LAUNCHED = "launched"  # spare -> pool: applied, the task's code runs on START
    REFUSED = "refused"  # spare -> pool: the launch cannot be applied (e.g. no such cwd)
    START = "start"  # pool -> spare: run the task's code


class ChannelError(Exception):
    """The other end of the channel sent something that is not a message, or too much."""


def encode(kind: ChannelKind, **fields: Any) -> bytes:
    return (json.dumps({"kind": kind.value, **fields}, separators=(",", ":")) + "\n").encode()


def decode(line: bytes) -> tuple[ChannelKind, dict[str, Any]]:
    """One channel line: (its kind, its other fields); ChannelError if it is not a message."""
    try:
        message = json.loads(line)
        kind = ChannelKind(message.pop("kind"))
    except (ValueError, TypeError, KeyError, AttributeError) as exc:
        raise ChannelError(f"not a channel message: {line[:80]!r}") from exc
    return kind, message


def parse_argv(argv: list[str]) -> tuple[list[str], list[str]]:
    """(the preload modules, the expected entry argv) of the spare's own argv."""
    preload: list[str] = []
    if argv[:1] == ["--preload"] and len(argv) > 1:
        preload = [name for name in argv[1].split(",") if name]
        argv = argv[2:]
    if argv[:1] != ["--"] or not task_entry.is_entry_argv(argv[1:]):
        raise ValueError(USAGE)
    return preload, argv[1:]


def _send(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def _receive(fd: int) -> bytes | None:
    """One line from the pool (blocking); None at EOF before a whole line."""
    data = bytearray()
    while b"\n" not in data:
        chunk = os.read(fd, _READ_BYTES)
        if not chunk:
            return None
        data += chunk
        if len(data) > MAX_LAUNCH_BYTES:
            raise ChannelError(f"a launch over {MAX_LAUNCH_BYTES} bytes")
    return bytes(data[:data.index(b"\n")])


def _rss_bytes() -> int | None:
    try:
        with open("/proc/self/statm", "rb") as statm:
            return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return None


def _startup_additions() -> dict[str, str]:
    """What the interpreter put into its own environment as it started (C locale coercion sets
    ``LC_CTYPE``): it would do the same in the task, whose import-time env is the same."""
    try:
        with open("/proc/self/environ", "rb") as environ:
            raw = environ.read()
    except OSError:
        return {}
    initial = dict(entry.split(b"=", 1) for entry in raw.split(b"\0") if b"=" in entry)
    return {name: value for name, value in os.environ.items()
            if initial.get(os.fsencode(name)) != os.fsencode(value)}


def _checked_launch(fields: dict[str, Any]) -> tuple[list[str], list[str], dict[str, str], str]:
    argv, orig_argv = fields.get("argv"), fields.get("orig_argv")
    environ, cwd = fields.get("env"), fields.get("cwd")
    if not (isinstance(argv, list) and all(isinstance(a, str) for a in argv)
            and task_entry.is_entry_argv(argv)):
        raise ChannelError("'argv' must be an entry argv: (-m MODULE | SCRIPT) [ARGS...]")
    if not (isinstance(orig_argv, list) and all(isinstance(a, str) for a in orig_argv)):
        raise ChannelError("'orig_argv' must be a list of strings")
    if not (isinstance(environ, dict)
            and all(isinstance(k, str) and isinstance(v, str) for k, v in environ.items())):
        raise ChannelError("'env' must map strings to strings")
    if not isinstance(cwd, str):
        raise ChannelError("'cwd' must be a string")
    return argv, orig_argv, environ, cwd


def _become(environ: dict[str, str], additions: dict[str, str], cwd: str,
            orig_argv: list[str]) -> None:
    """The launch's cwd and environment (whole, in its order), as ``exec`` would have given them."""
    os.chdir(cwd)
    os.environ.clear()
    for name, value in (*environ.items(), *additions.items()):
        os.environ[name] = value
    sys.orig_argv = orig_argv


def _told_to_start(fd: int) -> bool:
    try:
        line = _receive(fd)
        return line is not None and decode(line)[0] is ChannelKind.START
    except (ChannelError, OSError):
        return False


def wait_for_launch(argv: list[str]) -> list[str] | None:
    """Everything a spare does before it becomes its task: import, report, wait, apply the launch.
    Returns the entry argv to run, or None when the pool closed the channel without a launch."""
    additions = _startup_additions()  # first, before anything changes the environment
    try:
        fd = int(os.environ[SPARE_FD])
    except (KeyError, ValueError):
        sys.exit(f"worker.runtime.spare: started by the agent's SparePool only (no {SPARE_FD})")
    try:
        preload, expected = parse_argv(argv)
    except ValueError as exc:
        _send(fd, encode(ChannelKind.FAILED, error=str(exc)))
        os._exit(2)
    task_entry.set_sys_for(expected)
    started = time.monotonic()
    for name in preload:
        try:
            importlib.import_module(name)
        except BaseException as exc:  # SystemExit or KeyboardInterrupt in an import too
            error = f"cannot import {name!r}: {type(exc).__name__}: {exc}"[:MAX_ERROR_CHARS]
            _send(fd, encode(ChannelKind.FAILED, error=error))
            os._exit(1)  # not sys.exit: threads a half-done import started must not hold it
    _send(fd, encode(ChannelKind.READY, pid=os.getpid(), modules=preload, rss_bytes=_rss_bytes(),
                     import_s=round(time.monotonic() - started, 3)))
    try:
        line = _receive(fd)
        if line is None:
            return None
        kind, fields = decode(line)
        if kind is not ChannelKind.LAUNCH:
            raise ChannelError(f"expected a launch, got {kind.value!r}")
        entry, orig_argv, environ, cwd = _checked_launch(fields)
        _become(environ, additions, cwd, orig_argv)
    except (ChannelError, OSError, ValueError) as exc:  # ValueError: a NUL in the env
        with contextlib.suppress(OSError):
            _send(fd, encode(ChannelKind.REFUSED, error=str(exc)[:MAX_ERROR_CHARS]))
        os._exit(127)
    try:
        _send(fd, encode(ChannelKind.LAUNCHED))
    except OSError:
        os._exit(127)
    if not _told_to_start(fd):
        os._exit(127)
    os.close(fd)
    return entry


if __name__ == "__main__":
    _entry = wait_for_launch(sys.argv[1:])
    if _entry is not None:
        task_entry.run(_entry)
