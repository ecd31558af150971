"""The coordinator's end of one agent's JSON-lines conversation, over any pair of byte streams.

A reader thread turns every line the agent writes into an :class:`AgentMessage` for the sink and
ends with one :class:`AgentClosed`; an agent whose first line, its hello, announces another
tfcluster version is refused there (:mod:`launcher.backends.version_check`): nothing it says
reaches the sink but an ``AgentClosed`` carrying the error. Writes are serialised by a lock. The
local backend gives it a subprocess's pipes, the SSH backend a paramiko channel's files.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable
from typing import IO

from launcher.backends.base import AgentClosed, AgentMessage, Sink
from launcher.backends.version_check import VersionMismatch, check_first_line
from worker.wire.protocol import Message, ProtocolError, decode_event


class AgentChannel:
    def __init__(self, host: str, reader: IO[bytes], writer: IO[bytes], sink: Sink,
                 on_message: Callable[[Message], None] | None = None) -> None:
        self.host = host
        self._reader = reader
        self._writer = writer
        self._sink = sink
        self._on_message = on_message
        self._lock = threading.Lock()
        self._closed = False
        #: Why this agent was refused (its hello announced another version), if it was.
        self.refused: VersionMismatch | None = None
        self._thread = threading.Thread(target=self._read_loop, name=f"agent-{host}",
                                        daemon=True)

    def start(self) -> None:
        self._thread.start()

    def send(self, message: Message) -> None:
        with self._lock:
            if self._closed:
                return
            try:
                self._writer.write(message.encode())
                self._writer.flush()
            except (OSError, ValueError):
                self._closed = True  # the agent is gone; its AgentClosed is on its way

    def close_input(self) -> None:
        """EOF to the agent. Safe to call more than once."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            with contextlib.suppress(OSError, ValueError):
                self._writer.close()

    def join(self, timeout_s: float) -> bool:
        self._thread.join(timeout_s)
        return not self._thread.is_alive()

    def _read_loop(self) -> None:
        reason = "agent closed its output"
        first = True
        try:
            for raw in self._reader:
                if first:  # its hello: its versions are read before the rest of it
                    first = False
                    self.refused = check_first_line(self.host, raw)
                    if self.refused is not None:
                        reason = str(self.refused)
                        self.close_input()  # EOF before any launch: it exits, nothing started
                        break
                try:
                    message = decode_event(raw)
                except ProtocolError as exc:
                    reason = f"agent sent a bad message: {exc}"
                    continue
                if self._on_message is not None:
                    self._on_message(message)
                self._sink(AgentMessage(self.host, message, time.time()))
        except (OSError, ValueError) as exc:
            reason = f"connection to the agent broke: {exc}"
        self._sink(AgentClosed(self.host, reason, time.time(), refused=self.refused))
