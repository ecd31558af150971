"""Which run ``tfcluster status`` and ``logs`` read when no run directory is given: the latest one
under ``runs/`` here, where ``run``, ``local`` and ``drill`` put theirs by default
(``runs/<job>-<YYYYmmdd-HHMMSS>[-N]``, :func:`launcher.run.directory.new_run_dir`); and how
``logs`` reads a task's name (``chief``, ``chief:0``, ``worker:1``, ``worker-1``)."""

from __future__ import annotations

import re
import time
from collections.abc import Sequence
from pathlib import Path

from launcher.errors import UsageError
from launcher.run.directory import EVENTS_FILE

#: Where runs go unless ``--run-dir`` says otherwise (relative to the current directory).
RUNS_DIR = Path("runs")
#: The end of a default run directory's name: its start time and a suffix for runs in one second.
_STAMPED = re.compile(r"-(\d{8}-\d{6})(?:-(\d+))?$")
#: Task types of which a job has one task at most.
_SINGLE_TYPES = ("chief", "evaluator")
#: A task's log name (``worker-1``) or id (``worker:1``).
_TASK_SPELLINGS = re.compile(r"^(?P<type>[a-z]+)(?:[:-](?P<index>\d+))?$")


def _started(run_dir: Path) -> tuple[str, int]:
    """When a run started, as its name says (``YYYYmmdd-HHMMSS``, then its suffix); a name
    without a stamp: when its events file was last written."""
    found = _STAMPED.search(run_dir.name)
    if found is not None:
        return found.group(1), int(found.group(2) or 1)
    mtime = (run_dir / EVENTS_FILE).lstat().st_mtime
    return time.strftime("%Y%m%d-%H%M%S", time.localtime(mtime)), 0


def latest_run(verb: str, base: Path = RUNS_DIR) -> Path:
    """The run under ``base`` that started last (one with an ``events.jsonl``); one line if
    there is none."""
    try:
        runs = [path for path in base.iterdir()
                if path.is_dir() and not path.is_symlink() and (path / EVENTS_FILE).is_file()]
    except OSError:
        runs = []
    if not runs:
        raise UsageError(f"tfcluster {verb}: no run in {base}/ here (where runs go without "
                         "--run-dir); give a RUN_DIR")
    return max(runs, key=lambda path: (_started(path), path.name))


def looks_like_task(text: str) -> bool:
    """``text`` names a task (``chief``, ``worker:1``, ``worker-1``), not a directory."""
    return _TASK_SPELLINGS.match(text) is not None and not Path(text).is_dir()


def task_name(given: str, known: Sequence[str]) -> str:
    """The task id that ``given`` means among the ``known`` tasks of an attempt: ``worker:1`` as
    it is, ``worker-1`` (its log's name) as ``worker:1``, and a bare type (``chief``) as the one
    task of that type; one line when a bare type names several."""
    found = _TASK_SPELLINGS.match(given.strip())
    if found is None:
        return given
    kind, index = found.group("type"), found.group("index")
    if index is not None:
        return f"{kind}:{index}"
    same = [task for task in known if task.partition(":")[0] == kind]
    if len(same) == 1:
        return same[0]
    if len(same) > 1:
        raise UsageError(f"tfcluster logs: {given!r} is {len(same)} tasks "
                         f"({', '.join(same)}); give one, e.g. {same[0]}")
    return f"{kind}:0" if kind in _SINGLE_TYPES else given
