"""The agent's notes: one line each (``agent: ...``) on its stderr, which is
``RUN_DIR/agents/<host>.log`` (a local or Slurm agent writes it itself; over SSH tfcluster copies
it there, within its own bound).

Each note is said once per event, but an agent lives for the whole job (spares come and go with
every attempt), so what it writes is bounded too (:data:`MAX_NOTES_BYTES`): past it, one line says
that later notes are not kept. A note never raises, even if the log cannot be written.
"""

from __future__ import annotations

import contextlib
import sys
from typing import TextIO

#: The most an agent writes in notes over its life (below the bound of the copied log).
MAX_NOTES_BYTES = 48 * 1024 * 1024


class Notes:
    """Writes notes to ``stream`` (default: the agent's stderr) up to ``max_bytes``."""

    def __init__(self, max_bytes: int = MAX_NOTES_BYTES, stream: TextIO | None = None) -> None:
        self.max_bytes = max_bytes
        self.written = 0
        self._stream = stream

    def __call__(self, text: str) -> None:
        if self.written > self.max_bytes:
            return
        line = f"agent: {text}\n"
        self.written += len(line)
        if self.written > self.max_bytes:
            line = (f"agent: {self.max_bytes // 2**20} MiB of notes written; later ones are not "
                    "kept\n")
        with contextlib.suppress(OSError, ValueError):
            stream = self._stream or sys.stderr
            stream.write(line)
            stream.flush()


#: The agent's notes (one per process).
note = Notes()
