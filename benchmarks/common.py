"""What the benchmarks share: finding, waiting for and killing the processes that carry a
benchmark's marker env var, running the tfcluster CLI (:class:`Tfcluster`, every command recorded in
a :class:`CommandLog`), scratch directories and specs, ``events.jsonl``, statistics and progress
output.

The benchmarks run as ``python benchmarks/X.py``, with this directory on ``sys.path``: importing
this module also puts the repository on it, so ``tests`` (the sshd and process helpers) imports.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import os
import re
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil
import yaml

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from launcher.run.directory import EVENTS_FILE  # noqa: E402
from launcher.run.event_log import read_events as read_event_file  # noqa: E402
from launcher.run.events import EventType  # noqa: E402
from tests.support.procs import kill_all, wait_until_empty, with_env  # noqa: E402

Event = dict[str, Any]
#: How long one launch or detection run may take before it is killed.
RUN_TIMEOUT_S = 180.0


class BenchmarkError(RuntimeError):
    """A run did not behave as the benchmark expects (exit code, missing events, leftovers...)."""


# --- processes ----------------------------------------------------------------------------------


def marked_processes(var: str, marker: str) -> list[psutil.Process]:
    """Every live process whose environment carries the marker ``var=marker``."""
    return with_env(var, marker)


def wait_until_gone(var: str, marker: str, timeout_s: float) -> list[psutil.Process]:
    """Wait up to ``timeout_s`` for every marked process to end; returns those still alive."""
    return wait_until_empty(lambda: marked_processes(var, marker), timeout_s)


def kill_marked(var: str, marker: str) -> list[int]:
    """SIGKILL every process with the marker; returns their pids."""
    return kill_all(marked_processes(var, marker))


def new_marker() -> str:
    """A marker value unique to one benchmark invocation."""
    return uuid.uuid4().hex


# --- files --------------------------------------------------------------------------------------


@contextlib.contextmanager
def scratch(parent: Path, prefix: str) -> Iterator[Path]:
    """A fresh directory in ``parent``, removed on the way out."""
    path = Path(tempfile.mkdtemp(prefix=prefix, dir=parent))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def write_spec(work: Path, data: Mapping[str, Any], name: str = "spec.yaml") -> Path:
    """``data`` as the spec ``work/name``, its tasks' ``TMPDIR`` in ``work`` (unless it sets one):
    TensorFlow writes an autograph module per traced function there and removes it at exit, which a
    task killed by a drill or a teardown never reaches (a full ``run_all.py`` left about 180 in
    ``/tmp``)."""
    path = work / name
    spec = {**data, "env": {"TMPDIR": str(work), **data.get("env", {})}}
    path.write_text(yaml.safe_dump(spec, sort_keys=False), encoding="utf-8")
    return path


def merged(base: Mapping[str, Any], overrides: Mapping[str, Any]) -> dict[str, Any]:
    """``base`` with ``overrides`` applied: mappings are merged key by key, anything else replaced."""
    out = dict(base)
    for key, value in overrides.items():
        current = out.get(key)
        if isinstance(current, Mapping) and isinstance(value, Mapping):
            out[key] = merged(current, value)
        else:
            out[key] = value
    return out


def read_events(run_dir: Path) -> list[Event]:
    """The events of ``run_dir/events.jsonl`` (none if it does not exist; a line still being
    written is left out)."""
    path = run_dir / EVENTS_FILE
    if not path.exists():
        return []
    return read_event_file(path, torn_ok=True)


def of(events: Sequence[Event], kind: EventType, **fields: Any) -> list[Event]:
    """The events of type ``kind`` whose ``fields`` have the given values."""
    return [e for e in events if e.get("event") == kind
            and all(e.get(k) == v for k, v in fields.items())]


def one(events: Sequence[Event], kind: EventType, what: str, **fields: Any) -> Event:
    """The first event of ``of(...)``; BenchmarkError (saying ``what``) if there is none."""
    found = of(events, kind, **fields)
    if not found:
        raise BenchmarkError(f"no {kind.value} event {fields or ''} ({what})")
    return found[0]


def ts(event: Event) -> float:
    return float(event["ts"])


def default_tfcluster() -> list[str]:
    """The ``tfcluster`` console script beside this python (else the one on PATH)."""
    beside = Path(sys.executable).parent / "tfcluster"
    if beside.exists():
        return [str(beside)]
    return [shutil.which("tfcluster") or str(beside)]


# --- the commands a benchmark runs -------------------------------------------------------------


#: The random part ``tempfile.mkdtemp`` adds to a prefix.
_MKDTEMP_SUFFIX = re.compile(r"(\$TMP/[A-Za-z0-9.]+(?:-[A-Za-z0-9.]+)*-)[A-Za-z0-9_]{8}(?=/|\s|'|$)")


@dataclass
class CommandLog:
    """Every command a benchmark started and every spec it wrote, to be published as run: paths
    under the scratch ``root`` shown as ``$TMP/...`` (the random part of a scratch directory as
    ``XXXXXXXX``), long literal arguments by the name given in ``aliases``, the marker as
    ``$MARKER``. Identical commands are counted, not repeated."""

    root: Path | None = None
    aliases: dict[str, str] = field(default_factory=dict)  # literal -> the name shown
    marker: str | None = None
    commands: dict[str, int] = field(default_factory=dict)  # shown form -> times run
    specs: dict[str, str] = field(default_factory=dict)  # title -> YAML shown

    def show(self, text: str) -> str:
        for literal, name in self.aliases.items():
            text = text.replace(shlex.quote(literal), name).replace(literal, name)
        return self.show_paths(text)

    def show_paths(self, text: str) -> str:
        """``text`` with the scratch paths and the marker shown as in :meth:`show`."""
        if self.root is not None:
            text = text.replace(str(self.root), "$TMP")
        if self.marker:
            text = text.replace(self.marker, "$MARKER")
        return _MKDTEMP_SUFFIX.sub(r"\1XXXXXXXX", text)

    def record(self, argv: Sequence[str], times: int = 1, note: str | None = None) -> None:
        """Count ``argv`` as run ``times`` times; ``note`` is shown beside it (as a comment)."""
        shown = self.show(shlex.join(argv)) + (f"   # {note}" if note else "")
        self.commands[shown] = self.commands.get(shown, 0) + times

    def spec(self, title: str, data: Mapping[str, Any]) -> None:
        """Keep the first spec written under ``title``."""
        if title not in self.specs:
            self.specs[title] = self.show(yaml.safe_dump(dict(data), sort_keys=False))


@dataclass(frozen=True)
class CliRun:
    argv: tuple[str, ...]
    exit_code: int
    started_at: float  # time.time() just before Popen
    ended_at: float  # time.time() once it had exited
    stdout: str
    stderr: str
    run_dir: Path | None

    @property
    def events(self) -> list[Event]:
        return read_events(self.run_dir) if self.run_dir is not None else []

    def tail(self, lines: int = 3) -> str:
        """The last ``lines`` lines of its stderr, on one line."""
        return " | ".join(self.stderr.splitlines()[-lines:])


@dataclass(frozen=True)
class Tfcluster:
    """The tfcluster CLI as the benchmarks run it: ``argv`` (e.g. the console script), with the
    marker ``marker_var=marker`` in its environment (agents and local tasks inherit it: the name
    must not start with ``TFCLUSTER_``, whose variables tfcluster keeps from its tasks), plus
    ``env`` (None: removed); every command recorded in ``commands``."""

    argv: tuple[str, ...]
    marker_var: str
    marker: str
    commands: CommandLog
    env: Mapping[str, str | None] = field(default_factory=dict)

    def with_env(self, extra: Mapping[str, str | None]) -> Tfcluster:
        return dataclasses.replace(self, env={**self.env, **extra})

    def environ(self) -> dict[str, str]:
        merged_env = {**os.environ, self.marker_var: self.marker, "NO_COLOR": "1", **self.env}
        return {name: value for name, value in merged_env.items() if value is not None}

    def popen(self, args: Sequence[str], work: Path, *, cwd: Path | None = None,
              stdout: int | None = None,
              note: str | None = None) -> tuple[subprocess.Popen[bytes], float]:
        """Start ``tfcluster ARGS`` (stdout to ``stdout`` if given, else ``work/cli.stdout``;
        stderr to ``work/cli.stderr``); returns it and ``time.time()`` just before ``Popen``.
        ``note`` goes beside the command in the command log."""
        argv = [*self.argv, *args]
        self.commands.record(argv, note=note)
        with contextlib.ExitStack() as files:
            err = files.enter_context((work / "cli.stderr").open("wb"))
            out: int | Any = stdout if stdout is not None \
                else files.enter_context((work / "cli.stdout").open("wb"))
            started = time.time()
            proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=err,
                                    cwd=cwd or work, env=self.environ())
        return proc, started

    def run(self, args: Sequence[str], work: Path, *, timeout_s: float,
            run_dir: Path | None = None, cwd: Path | None = None,
            note: str | None = None) -> CliRun:
        """``tfcluster ARGS`` to completion; if it takes longer than ``timeout_s`` it and every
        marked process are killed (BenchmarkError)."""
        proc, started = self.popen(args, work, cwd=cwd, note=note)
        try:
            code = proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            self.kill_leftovers()
            raise BenchmarkError(f"{shlex.join([*self.argv, *args][:6])}... did not finish "
                                 f"within {timeout_s:.0f}s") from None
        ended = time.time()
        return CliRun((*self.argv, *args), code, started, ended, _read(work / "cli.stdout"),
                      _read(work / "cli.stderr"), run_dir)

    def leftovers(self) -> list[psutil.Process]:
        return marked_processes(self.marker_var, self.marker)

    def kill_leftovers(self) -> list[int]:
        return kill_marked(self.marker_var, self.marker)

    def check_no_leftovers(self, wait_s: float) -> None:
        """BenchmarkError if a marked process is still alive ``wait_s`` from now (all killed)."""
        if wait_until_gone(self.marker_var, self.marker, wait_s):
            pids = self.kill_leftovers()
            raise BenchmarkError(f"{len(pids)} process(es) still running {wait_s:.0f}s after "
                                 f"tfcluster exited (killed): {pids}")


def failure_reason(run: CliRun, run_dir: Path) -> str:
    """Why a tfcluster run failed, in one line: what the CLI said about an agent, the root cause
    from ``events.jsonl`` and the last line of an agent's traceback, whichever exist."""
    parts = [line.removeprefix("tfcluster: ").strip()
             for line in (run.stdout + run.stderr).splitlines() if "agent on" in line][:1]
    with contextlib.suppress(OSError, ValueError):
        for event in read_events(run_dir):
            cause = event.get("root_cause") if event.get("event") == EventType.JOB_FAILED else None
            if isinstance(cause, dict):
                parts.append(f"root cause {cause.get('task')} {cause.get('kind')}: "
                             f"{cause.get('message') or cause.get('exit_code')}")
    for log in sorted([*run_dir.glob("agents/*.log"), *run_dir.glob("attempt-*/agent-*.log")]):
        text = log.read_text(encoding="utf-8", errors="replace")
        if "Traceback" in text:
            last = [line for line in text.splitlines() if line.strip()][-1]
            parts.append(f"agent crashed ({log.name}): {last.strip()}")
    return "; ".join(parts) or f"exit code {run.exit_code}, no further detail"


def _read(path: Path) -> str:
    return path.read_text(encoding="utf-8", errors="replace") if path.exists() else ""


# --- statistics and output ----------------------------------------------------------------------


def percentile(values: Sequence[float], pct: float) -> float:
    """Linear interpolation between closest ranks (numpy's default)."""
    ordered = sorted(values)
    rank = (len(ordered) - 1) * pct / 100
    low, high = math.floor(rank), math.ceil(rank)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def median(values: Iterable[float]) -> float:
    return float(statistics.median(values))


def loadavg() -> str:
    """The 1, 5 and 15 minute load averages, as ``0.12 0.34 0.56``."""
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def progress(text: str) -> None:
    print(text, file=sys.stderr, flush=True)
