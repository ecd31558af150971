"""The doctor's program on one host: its hello, then one answer per request, in order, until EOF on
its input (see :mod:`worker.wire.doctor` for the requests). A request that fails is answered with
its error and the program goes on; the port it serves for peers is closed when it ends."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from typing import IO, Any

from worker.doctor.facts import host_facts
from worker.doctor.peer import PeerServer, round_trips, stream
from worker.doctor.storage import storage_speed
from worker.wire.doctor import HELLO, VERSION_FIELD, Op
from worker.wire.version import TFCLUSTER_VERSION


class Program:
    """One host's side of a doctor run."""

    def __init__(self) -> None:
        self.server: PeerServer | None = None
        self._ops: dict[str, Callable[[dict[str, Any]], dict[str, Any]]] = {
            Op.FACTS.value: lambda _: host_facts(),
            Op.CLOCK.value: lambda _: {"time": time.time()},
            Op.SERVE.value: self._serve,
            Op.RTT.value: _rtt,
            Op.STREAM.value: _stream,
            Op.STORAGE.value: _storage,
        }

    def answer(self, raw: bytes) -> dict[str, Any]:
        """The answer to one request line."""
        try:
            request = json.loads(raw)
        except ValueError as exc:
            return {"id": None, "ok": False, "error": f"not a JSON request: {exc}"}
        if not isinstance(request, dict):
            return {"id": None, "ok": False, "error": "not a JSON object"}
        ident = request.get("id")
        handler = self._ops.get(str(request.get("op")))
        if handler is None:
            return {"id": ident, "ok": False, "error": f"unknown op {request.get('op')!r}"}
        try:
            return {"id": ident, "ok": True, **handler(request)}
        except (OSError, ValueError, KeyError, TypeError) as exc:
            return {"id": ident, "ok": False, "error": _describe(exc)}

    def _serve(self, request: dict[str, Any]) -> dict[str, Any]:
        if self.server is not None:
            self.server.close()
        self.server = PeerServer(str(request["address"]), [int(p) for p in request["ports"]])
        return {"port": self.server.port, "bound": self.server.bound}

    def close(self) -> None:
        if self.server is not None:
            self.server.close()
            self.server = None


def _describe(exc: Exception) -> str:
    if isinstance(exc, KeyError):
        return f"request without {exc}"
    if isinstance(exc, OSError) and exc.strerror:
        return f"{exc.strerror}: {exc.filename}" if exc.filename else exc.strerror
    return str(exc) or type(exc).__name__


def _rtt(request: dict[str, Any]) -> dict[str, Any]:
    samples = round_trips(str(request["address"]), int(request["port"]), int(request["count"]),
                          float(request["budget_s"]))
    return {"samples_ms": samples}


def _stream(request: dict[str, Any]) -> dict[str, Any]:
    sent, elapsed = stream(str(request["address"]), int(request["port"]),
                           float(request["seconds"]))
    return {"bytes": sent, "elapsed_s": elapsed}


def _storage(request: dict[str, Any]) -> dict[str, Any]:
    speed = storage_speed(str(request["dir"]), int(request["size_bytes"]),
                          float(request["budget_s"]))
    return {"write_bytes": speed.write_bytes, "write_s": speed.write_s,
            "read_bytes": speed.read_bytes, "read_s": speed.read_s,
            "cache_dropped": speed.cache_dropped}


def _write(out: IO[bytes], payload: dict[str, Any]) -> None:
    out.write((json.dumps(payload, separators=(",", ":")) + "\n").encode())
    out.flush()


def run(commands: IO[bytes], out: IO[bytes]) -> int:
    """Say hello on ``out``, answer every request line of ``commands`` until its EOF."""
    program = Program()
    try:
        _write(out, {"op": HELLO, VERSION_FIELD: TFCLUSTER_VERSION, "pid": os.getpid()})
        for raw in commands:
            _write(out, program.answer(raw))
    except BrokenPipeError:
        return 1  # the coordinator is gone
    finally:
        program.close()
    return 0
