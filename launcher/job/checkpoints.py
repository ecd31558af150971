"""Finding the chief's latest *complete* checkpoint without importing TensorFlow.

Understands TensorFlow's ``tf.train.CheckpointManager`` layout — a ``checkpoint`` state file (text
protobuf: ``model_checkpoint_path`` / ``all_model_checkpoint_paths``) beside ``<prefix>.index`` and
``<prefix>.data-NNNNN-of-MMMMM`` files — either directly in the checkpoint directory or in its
``chief/`` subdirectory, where Keras ``BackupAndRestore`` keeps the chief's copy under MWMS.

A checkpoint is complete when its ``.index`` file and every one of its data shards exist and are not
empty. The newest complete one that has not been marked bad (a task failed to restore it) wins; the
ones skipped on the way are reported with the reason.

File access goes through :class:`CheckpointFS`, so the same code reads a local directory or, when the
chief is remote, one over SFTP.
"""

from __future__ import annotations

import codecs
import os
import posixpath
import re
import shutil
from collections.abc import Collection, Iterable
from dataclasses import dataclass
from typing import Protocol

STATE_FILE = "checkpoint"
KERAS_CHIEF_DIR = "chief"
WORKER_TEMP_PREFIX = "workertemp_"

_STATE_LINE = re.compile(r'^\s*(model_checkpoint_path|all_model_checkpoint_paths)\s*:\s*"(.*)"\s*$')
_STEP = re.compile(r"-(\d+)$")
_SHARD = re.compile(r"\.data-(\d+)-of-(\d+)$")


class CheckpointFS(Protocol):
    """The few file operations discovery and cleanup need (local or SFTP)."""

    def read_text(self, path: str) -> str | None:
        """The file's text, or None when it does not exist or cannot be read."""

    def listdir(self, path: str) -> list[str] | None:
        """Entry names, or None when the directory does not exist."""

    def size(self, path: str) -> int | None:
        """Size in bytes, or None when the file does not exist."""

    def is_dir(self, path: str) -> bool: ...

    def remove_tree(self, path: str) -> None: ...


class LocalFS:
    def read_text(self, path: str) -> str | None:
        try:
            with open(path, encoding="utf-8", errors="replace") as handle:
                return handle.read()
        except OSError:
            return None

    def listdir(self, path: str) -> list[str] | None:
        try:
            return os.listdir(path)
        except OSError:
            return None

    def size(self, path: str) -> int | None:
        try:
            return os.stat(path).st_size
        except OSError:
            return None

    def is_dir(self, path: str) -> bool:
        return os.path.isdir(path)

    def remove_tree(self, path: str) -> None:
        shutil.rmtree(path, ignore_errors=True)


@dataclass(frozen=True)
class Checkpoint:
    prefix: str  # absolute path without suffix, as tf.train.Checkpoint.restore takes it
    step: int | None  # from the ``-N`` suffix CheckpointManager gives it (checkpoint_number)


@dataclass(frozen=True)
class Skipped:
    prefix: str
    reason: str


@dataclass(frozen=True)
class Discovery:
    checkpoint: Checkpoint | None
    skipped: tuple[Skipped, ...]
    directory: str | None  # where the chief's checkpoints were found


def step_of(prefix: str) -> int | None:
    found = _STEP.search(posixpath.basename(prefix))
    return int(found.group(1)) if found else None


def parse_state(text: str) -> list[str]:
    """Checkpoint paths named by a ``checkpoint`` state file, newest first."""
    latest: str | None = None
    listed: list[str] = []
    for line in text.splitlines():
        found = _STATE_LINE.match(line)
        if not found:
            continue
        # protobuf text format: C escapes, non-ASCII bytes as octal (\303\251 is "é")
        value = codecs.escape_decode(found.group(2).encode())[0].decode("utf-8", "replace")
        if found.group(1) == "model_checkpoint_path":
            latest = value
        else:
            listed.append(value)
    ordered = list(reversed(listed))
    if latest is not None and latest not in ordered:
        ordered.insert(0, latest)
    return ordered


def chief_directory(fs: CheckpointFS, directory: str) -> str | None:
    """Where the chief's checkpoints are: ``directory`` itself or its Keras ``chief/``."""
    for candidate in (directory, posixpath.join(directory, KERAS_CHIEF_DIR)):
        names = fs.listdir(candidate)
        if names and (STATE_FILE in names or any(n.endswith(".index") for n in names)):
            return candidate
    return None


def _candidates(fs: CheckpointFS, directory: str, names: list[str]) -> list[str]:
    """Prefixes from the state file (newest first), then any other ``*.index`` by step."""
    state = fs.read_text(posixpath.join(directory, STATE_FILE))
    from_state = [p if posixpath.isabs(p) else posixpath.join(directory, p)
                  for p in parse_state(state or "")]
    on_disk = [posixpath.join(directory, n[: -len(".index")]) for n in names
               if n.endswith(".index")]
    extra = sorted((p for p in on_disk if p not in from_state),
                   key=lambda p: step_of(p) or -1, reverse=True)
    return list(dict.fromkeys(from_state + extra))


def completeness_problem(fs: CheckpointFS, prefix: str, names: Collection[str]) -> str | None:
    """Why the checkpoint at ``prefix`` cannot be restored, or None when it is complete."""
    base = posixpath.basename(prefix)
    index_size = fs.size(prefix + ".index")
    if not index_size:
        return "missing .index file" if index_size is None else "empty .index file"
    shards = [n for n in names if n.startswith(base + ".data-")]
    if not shards:
        return "no .data file"
    totals = {int(m.group(2)) for n in shards if (m := _SHARD.search(n))}
    if len(totals) != 1:
        return "data shards disagree on their count"
    total = totals.pop()
    for index in range(total):
        name = f"{base}.data-{index:05d}-of-{total:05d}"
        size = fs.size(posixpath.join(posixpath.dirname(prefix), name))
        if size is None:
            return f"missing {name}"
        if size == 0:
            return f"empty {name}"
    return None


def latest_checkpoint(directory: str, fs: CheckpointFS | None = None,
                      bad: Iterable[str] = ()) -> Discovery:
    """The newest complete checkpoint of the chief in ``directory`` that is not in ``bad``."""
    fs = fs or LocalFS()
    found_in = chief_directory(fs, directory)
    if found_in is None:
        return Discovery(None, (), None)
    names = fs.listdir(found_in) or []
    bad_set = set(bad)
    skipped: list[Skipped] = []
    for prefix in _candidates(fs, found_in, names):
        if prefix in bad_set:
            skipped.append(Skipped(prefix, "a task failed to restore it"))
            continue
        problem = completeness_problem(fs, prefix, names)
        if problem is None:
            return Discovery(Checkpoint(prefix, step_of(prefix)), tuple(skipped), found_in)
        skipped.append(Skipped(prefix, problem))
    return Discovery(None, tuple(skipped), found_in)


def remove_worker_temp_dirs(directory: str, fs: CheckpointFS | None = None) -> list[str]:
    """Remove non-chief ``workertemp_*`` copies left by a failed attempt; never the chief's."""
    fs = fs or LocalFS()
    removed = []
    for name in fs.listdir(directory) or []:
        path = posixpath.join(directory, name)
        if name.startswith(WORKER_TEMP_PREFIX) and fs.is_dir(path):
            fs.remove_tree(path)
            removed.append(path)
    return removed
