"""``RUN_DIR/agents/<host>.log`` where tfcluster copies an agent's stderr into it (agents reached
over SSH, the early local agent): bounded, like every file tfcluster writes in a run directory.

An agent writes little there (its notes, each said once per event, and a traceback if it
crashes), but what reaches its stderr is not tfcluster's to choose, and the copy runs as long as
the job. Past :data:`MAX_AGENT_LOG_BYTES` later bytes are not kept; one line says so. (A local or
Slurm agent's stderr is the log file itself: it writes its own notes.)
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import BinaryIO

from worker.wire.safe_open import open_appending_bytes

#: The most of an agent's stderr its log keeps.
MAX_AGENT_LOG_BYTES = 64 * 1024 * 1024


class AgentLog:
    """The log opened for appending (never through a symlink); :meth:`write` keeps what fits."""

    def __init__(self, path: Path, max_bytes: int = MAX_AGENT_LOG_BYTES) -> None:
        self._file: BinaryIO = open_appending_bytes(path)
        self.path = path
        self.max_bytes = max_bytes
        self.written = os.fstat(self._file.fileno()).st_size  # a resumed run's agent appends
        self.dropped_bytes = 0

    @property
    def closed(self) -> bool:
        return self._file.closed

    def write(self, data: bytes) -> None:
        """Append ``data`` if the bound leaves room for it; the first that does not fit is
        replaced by a line saying that nothing more is kept."""
        if self.written + len(data) <= self.max_bytes:
            self._file.write(data)
            self._file.flush()
            self.written += len(data)
            return
        if not self.dropped_bytes:
            self._file.write(f"tfcluster: this log reached its bound of "
                             f"{self.max_bytes // 2**20} MiB; the agent's later output is not "
                             "kept\n".encode())
            self._file.flush()
        self.dropped_bytes += len(data)

    def flush(self) -> None:
        self._file.flush()

    def close(self) -> None:
        self._file.close()

    def __enter__(self) -> AgentLog:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()
