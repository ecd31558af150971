"""Finding the chief's latest *complete* checkpoint without importing TensorFlow.

Understands TensorFlow's ``tf.train.CheckpointManager`` layout — a ``checkpoint`` state file (text
protobuf: ``model_checkpoint_path`` / ``all_model_checkpoint_paths``) beside ``<prefix>.index`` and
``<prefix>.data-NNNNN-of-MMMMM`` files — either directly in the checkpoint directory or in its
``chief/`` subdirectory, where Keras ``BackupAndRestore`` keeps the chief's copy under MWMS.

A checkpoint is complete when its ``.index`` file and every one of its data shards exist and are not
empty. The newest complete one that has not been marked bad (a task failed to restore it) wins; the
ones skipped on the way are reported with the reason. Whatever the state file holds, discovery never
raises: an entry that cannot be decoded (a bad escape, bytes that are not UTF-8, a NUL) is skipped
with the reason, like an incomplete checkpoint.

File access goes through :class:`CheckpointFS`, so the same code reads a local directory or, when the
chief is remote, one over SFTP.
"""

from __future__ import annotations

import os
import posixpath
import re
import shutil
from collections.abc import Collection, Iterable
from dataclasses import dataclass
from typing import Protocol

from worker.wire.safe_open import UnsafeFileError, read_text

STATE_FILE = "checkpoint"
KERAS_CHIEF_DIR = "chief"
WORKER_TEMP_PREFIX = "workertemp_"
#: What PreemptionCheckpointHandler names a non-chief task's directory beside the checkpoint dir.
_HANDLER_TEMP = re.compile(WORKER_TEMP_PREFIX + r"[0-9]{1,9}")

_STATE_LINE = re.compile(r'^\s*(model_checkpoint_path|all_model_checkpoint_paths)\s*:\s*"(.*)"\s*$')
#: A step number has at most 19 digits (TensorFlow's checkpoint_number is an int64); a longer run
#: of digits is not a step (and ``int()`` of more than 4300 digits raises).
_STEP = re.compile(r"-([0-9]{1,19})$")
#: One escape of protobuf's text format (as TensorFlow writes the state file): octal, hex, \u,
#: \U, a one-letter escape, or a backslash that ends the string.
_ESCAPE = re.compile(r"\\(?:([0-7]{1,3})|x([0-9A-Fa-f]{1,2})|u([0-9A-Fa-f]{4})|U([0-9A-Fa-f]{8})"
                     r"|(.)|$)", re.DOTALL)
_SIMPLE_ESCAPES = {"a": 7, "b": 8, "f": 12, "n": 10, "r": 13, "t": 9, "v": 11, "\\": 92, "?": 63,
                   "'": 39, '"': 34}
_BYTE_MAX = 255
#: An entry that cannot be decoded is quoted in the report up to this many characters.
_SHOWN_ENTRY_CHARS = 200
_SHARD = re.compile(r"\.data-(\d+)-of-(\d+)$")
#: Most bytes of a ``checkpoint`` state file that are read (a line per checkpoint kept).
MAX_STATE_BYTES = 16 * 1024 * 1024


class CheckpointFS(Protocol):
    """The few file operations discovery and cleanup need (local or SFTP)."""

    def read_text(self, path: str) -> str | None:
        """The file's text (at most :data:`MAX_STATE_BYTES`), or None when it does not exist
        or cannot be read; :class:`~worker.wire.safe_open.UnsafeFileError` when it is not a
        regular file (a symlink, or a FIFO that would block the read forever)."""

    def listdir(self, path: str) -> list[str] | None:
        """Entry names, or None when the directory does not exist."""

    def size(self, path: str) -> int | None:
        """Size in bytes, or None when the file does not exist."""

    def is_dir(self, path: str) -> bool: ...

    def remove_tree(self, path: str) -> None: ...


class LocalFS:
    def read_text(self, path: str) -> str | None:
        try:
            return read_text(path, MAX_STATE_BYTES)
        except UnsafeFileError:
            raise
        except (OSError, ValueError):  # ValueError: a NUL in the path
            return None

    def listdir(self, path: str) -> list[str] | None:
        try:
            return os.listdir(path)
        except (OSError, ValueError):
            return None

    def size(self, path: str) -> int | None:
        try:
            return os.stat(path).st_size
        except (OSError, ValueError):
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


@dataclass(frozen=True)
class StateEntries:
    """What a ``checkpoint`` state file names: the paths it could be decoded to, newest first, and
    the entries it could not (each as written, with why)."""

    paths: tuple[str, ...]
    unreadable: tuple[Skipped, ...] = ()


class _Undecodable(ValueError):
    """A state file entry that names no path: the message says why."""


def _plain_bytes(plain: str) -> bytes:
    """Unescaped text of an entry as bytes; ``_Undecodable`` for a quote or a lone surrogate."""
    if '"' in plain:
        raise _Undecodable('an unescaped " inside the quoted path')
    try:
        return plain.encode("utf-8")
    except UnicodeEncodeError:
        raise _Undecodable("it holds a character that is not UTF-8") from None


def _unescape(written: str) -> str:
    """A string field of protobuf's text format (C escapes; TensorFlow writes non-ASCII bytes as
    octal, ``\\303\\251`` is "é") to the path it names; ``_Undecodable`` if it names none."""
    out = bytearray()
    position = 0
    for found in _ESCAPE.finditer(written):
        out += _plain_bytes(written[position:found.start()])
        position = found.end()
        octal, hexa, short, long, letter = found.groups()
        if octal is not None or hexa is not None:
            value = int(octal, 8) if octal is not None else int(hexa, 16)
            if value > _BYTE_MAX:
                raise _Undecodable(f"the escape \\{octal} is not a byte")
            out.append(value)
        elif short is not None or long is not None:
            try:
                out += chr(int(short or long, 16)).encode("utf-8")
            except (ValueError, UnicodeEncodeError):
                raise _Undecodable(f"the escape {found.group()} is not a character") from None
        elif letter is not None and letter in _SIMPLE_ESCAPES:
            out.append(_SIMPLE_ESCAPES[letter])
        elif letter is not None:
            raise _Undecodable(f"unknown escape \\{letter}" if letter not in "xuU"
                               else f"the escape \\{letter} lacks its hex digits")
        else:
            raise _Undecodable("a lone backslash ends the quoted path")
    out += _plain_bytes(written[position:])
    try:
        path = out.decode("utf-8")
    except UnicodeDecodeError:
        raise _Undecodable("its bytes are not UTF-8") from None
    if "\0" in path:
        raise _Undecodable("it contains a NUL byte")
    return path


def read_state(text: str) -> StateEntries:
    """Checkpoint paths named by a ``checkpoint`` state file, newest first, and the entries that
    name no path (skipped with the reason). Never raises, whatever ``text`` holds."""
    latest: str | None = None
    listed: list[str] = []
    unreadable: list[Skipped] = []
    for line in text.splitlines():
        found = _STATE_LINE.match(line)
        if not found:
            continue
        try:
            value = _unescape(found.group(2))
        except _Undecodable as exc:
            written = found.group(2)
            shown = (written if len(written) <= _SHOWN_ENTRY_CHARS
                     else written[:_SHOWN_ENTRY_CHARS] + f"... ({len(written)} characters)")
            unreadable.append(Skipped(shown, f"unreadable entry in the state file: {exc}"))
            continue
        if found.group(1) == "model_checkpoint_path":
            latest = value
        else:
            listed.append(value)
    ordered = list(reversed(listed))
    if latest is not None and latest not in ordered:
        ordered.insert(0, latest)
    return StateEntries(tuple(ordered), tuple(unreadable))


def chief_directory(fs: CheckpointFS, directory: str) -> str | None:
    """Where the chief's checkpoints are: ``directory`` itself or its Keras ``chief/``."""
    for candidate in (directory, posixpath.join(directory, KERAS_CHIEF_DIR)):
        names = fs.listdir(candidate)
        if names and (STATE_FILE in names or any(n.endswith(".index") for n in names)):
            return candidate
    return None


def _candidates(fs: CheckpointFS, directory: str, names: list[str]
                ) -> tuple[list[str], tuple[Skipped, ...]]:
    """Prefixes from the state file (newest first), then any other ``*.index`` by step; and the
    state file's entries that name no path."""
    path = posixpath.join(directory, STATE_FILE)
    try:
        state = read_state(fs.read_text(path) or "")
    except UnsafeFileError as exc:
        state = StateEntries((), (Skipped(path, f"the state file is {exc.what}: not read (remove "
                                                "it if it is not yours)"),))
    from_state = [p if posixpath.isabs(p) else posixpath.join(directory, p) for p in state.paths]
    on_disk = [posixpath.join(directory, n[: -len(".index")]) for n in names
               if n.endswith(".index")]
    extra = sorted((p for p in on_disk if p not in from_state),
                   key=lambda p: step_of(p) or -1, reverse=True)
    return list(dict.fromkeys(from_state + extra)), state.unreadable


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
    candidates, unreadable = _candidates(fs, found_in, names)
    skipped = list(unreadable)
    for prefix in candidates:
        if prefix in bad_set:
            skipped.append(Skipped(prefix, "a task failed to restore it"))
            continue
        problem = completeness_problem(fs, prefix, names)
        if problem is None:
            return Discovery(Checkpoint(prefix, step_of(prefix)), tuple(skipped), found_in)
        skipped.append(Skipped(prefix, problem))
    return Discovery(None, tuple(skipped), found_in)


def remove_worker_temp_dirs(directory: str, fs: CheckpointFS | None = None) -> list[str]:
    """Remove the checkpoint copies non-chief tasks left, never the chief's:

    - ``workertemp_*`` inside the checkpoint directory (``worker.checkpointing``, Keras'
      ``BackupAndRestore``);
    - those of TensorFlow's ``PreemptionCheckpointHandler`` beside it,
      ``<parent>/workertemp_<task id>/<basename>`` (``failure_handling._non_chief_checkpoint_dir``;
      TF removes them only after a preemption save), each only if it holds nothing but that
      copy: another job's beside it is left alone.
    """
    fs = fs or LocalFS()
    removed = []
    for name in fs.listdir(directory) or []:
        path = posixpath.join(directory, name)
        if name.startswith(WORKER_TEMP_PREFIX) and fs.is_dir(path):
            fs.remove_tree(path)
            removed.append(path)
    parent, base = posixpath.split(posixpath.normpath(directory))
    for name in fs.listdir(parent or ".") or []:
        path = posixpath.join(parent, name)
        if _HANDLER_TEMP.fullmatch(name) and fs.is_dir(path) and \
                set(fs.listdir(path) or []) <= {base}:
            fs.remove_tree(path)
            removed.append(path)
    return removed
