"""A run directory's files opened for a person (``tfcluster status``, ``tfcluster logs``).

Every task of a job can write its run directory, and so can anyone when it is in a shared place:
a name there may be a symlink planted to another file (``/etc/shadow`` must not be printed), a
FIFO (an ``open`` that never returns) or a device (``/dev/zero``: a read that never ends). So each
is opened as :mod:`worker.wire.safe_open` opens files in shared places, and what is refused is one
:class:`~launcher.errors.UsageError` line naming the file.
"""

from __future__ import annotations

from pathlib import Path
from typing import BinaryIO

from launcher.errors import UsageError
from worker.wire.safe_open import UnsafeFileError, open_reading, refuse_unless_regular


def open_run_file(path: Path, verb: str) -> BinaryIO:
    """``path`` opened to read (binary): a regular file, not through a symlink, never blocking."""
    try:
        return open_reading(path)
    except UnsafeFileError as exc:
        raise UsageError(f"tfcluster {verb}: {exc}") from None


def refuse_planted(path: Path, verb: str) -> None:
    """One :class:`UsageError` line when something that is not a regular file has the name
    ``path``; nothing when a regular file or nothing is there (or its directory is not one)."""
    try:
        refuse_unless_regular(path, writing=False)
    except UnsafeFileError as exc:
        raise UsageError(f"tfcluster {verb}: {exc}") from None
    except OSError:
        pass


def unsafe_to_usage(exc: UnsafeFileError, verb: str) -> UsageError:
    """The refusal ``exc`` as the verb's one line."""
    return UsageError(f"tfcluster {verb}: {exc}")
