"""What the benchmarks share: finding, waiting for and killing the processes that carry a
benchmark's marker env var, scratch directories, ``events.jsonl``, statistics and progress output.

The benchmarks run as ``python benchmarks/X.py``, with this directory on ``sys.path``: importing
this module also puts the repository on it, so ``tests`` (the sshd and process helpers) imports.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import shutil
import statistics
import sys
import tempfile
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

import psutil

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from tests.procs import kill_all, wait_until_empty, with_env  # noqa: E402

Event = dict[str, Any]


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


# --- files --------------------------------------------------------------------------------------


@contextlib.contextmanager
def scratch(parent: Path, prefix: str) -> Iterator[Path]:
    """A fresh directory in ``parent``, removed on the way out."""
    path = Path(tempfile.mkdtemp(prefix=prefix, dir=parent))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def read_events(run_dir: Path) -> list[Event]:
    """The events of ``run_dir/events.jsonl`` (none if it does not exist; a line still being
    written is left out)."""
    path = run_dir / "events.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()
            if line.strip().endswith("}")]


def default_tfcluster() -> list[str]:
    """The ``tfcluster`` console script beside this python (else the one on PATH)."""
    beside = Path(sys.executable).parent / "tfcluster"
    if beside.exists():
        return [str(beside)]
    return [shutil.which("tfcluster") or str(beside)]


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
