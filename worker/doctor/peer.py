"""The network half of the doctor's program: the port this host serves for its peers, and the two
measurements it makes of a peer's port, the round trip of one byte and a stream's throughput.

Every connection ends by the side that opened it (the measuring host): the serving port is left
with no TIME_WAIT, free for the job's task that binds it next. Every connect, read and write has a
timeout; a peer that stops answering ends the measurement with an error, never a hang.
"""

from __future__ import annotations

import contextlib
import socket
import struct
import threading
import time
from collections.abc import Iterator, Sequence

from worker.wire.doctor import ECHO_MODE, IO_TIMEOUT_S, SINK_MODE

#: A stream's writes: large enough that Python's per-call cost does not limit a fast link, small
#: enough that one write to a slow one (50 kbit/s) ends within :data:`IO_TIMEOUT_S`.
_CHUNK = bytes(64 * 1024)
_COUNT = struct.Struct("!Q")


class PeerServer:
    """Serves this host's port for its peers (``ECHO_MODE``, ``SINK_MODE``), a thread per
    connection, until :meth:`close`."""

    def __init__(self, address: str, ports: Sequence[int]) -> None:
        self._sock, self.bound = _listen(address, ports)
        self.port = int(self._sock.getsockname()[1])
        self._closed = threading.Event()
        self._answering: list[threading.Thread] = []
        self._acceptor = threading.Thread(target=self._accept, name="doctor-serve", daemon=True)
        self._acceptor.start()

    def _accept(self) -> None:
        while not self._closed.is_set():
            try:
                conn, _ = self._sock.accept()
            except OSError:
                return  # closed
            answering = threading.Thread(target=_answer, args=(conn,), name="doctor-peer",
                                         daemon=True)
            answering.start()
            self._answering = [t for t in self._answering if t.is_alive()] + [answering]

    def close(self) -> None:
        """Stop serving; return once every connection still being answered has ended (its peer
        closed it, or it timed out), so that no socket of this server holds the port any more."""
        self._closed.set()
        with contextlib.suppress(OSError):
            self._sock.shutdown(socket.SHUT_RDWR)
        self._sock.close()
        deadline = time.monotonic() + IO_TIMEOUT_S
        self._acceptor.join(IO_TIMEOUT_S)
        for answering in self._answering:
            answering.join(max(0.0, deadline - time.monotonic()))


def _listen(address: str, ports: Sequence[int]) -> tuple[socket.socket, str]:
    """A listening socket at ``address`` on the first free of ``ports`` (else one the kernel
    picks); at the wildcard address when ``address`` is not this host's to bind."""
    info = socket.getaddrinfo(address, 0, type=socket.SOCK_STREAM)[0]
    family, bound = info[0], str(info[4][0])
    candidates = [(bound, p) for p in ports if p] + [(bound, 0)]
    wildcard = "::" if family == socket.AF_INET6 else "0.0.0.0"
    candidates += [(wildcard, p) for p in ports if p] + [(wildcard, 0)]
    error: OSError | None = None
    for host, port in candidates:
        sock = socket.socket(family, socket.SOCK_STREAM)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind((host, port))
            sock.listen(16)
        except OSError as exc:
            sock.close()
            error = exc
            continue
        return sock, host
    raise error or OSError(f"cannot listen at {address}")


def _answer(conn: socket.socket) -> None:
    with conn:
        conn.settimeout(IO_TIMEOUT_S)
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        with contextlib.suppress(OSError):
            mode = conn.recv(1)
            if mode == ECHO_MODE:
                while data := conn.recv(64):
                    conn.sendall(data)
            elif mode == SINK_MODE:
                buffer = bytearray(1024 * 1024)
                total = 0
                while count := conn.recv_into(buffer):
                    total += count
                # the peer's FIN came first: the TIME_WAIT is its, not this port's
                conn.sendall(_COUNT.pack(total))


@contextlib.contextmanager
def _with_peer(address: str, port: int, mode: bytes) -> Iterator[socket.socket]:
    """A connection to the peer at ``address``:``port`` asking for ``mode``; any error raised
    in it names the peer."""
    what = "connect to"
    try:
        with socket.create_connection((address, port), timeout=IO_TIMEOUT_S) as sock:
            what = "talk to"
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            sock.sendall(mode)
            yield sock
    except OSError as exc:
        raise OSError(f"cannot {what} {address} port {port}: {exc.strerror or exc}") from exc


def round_trips(address: str, port: int, count: int, budget_s: float) -> list[float]:
    """Milliseconds of each of up to ``count`` one-byte round trips to the peer at
    ``address``:``port``, for at most ``budget_s`` (at least one)."""
    samples: list[float] = []
    with _with_peer(address, port, ECHO_MODE) as sock:
        end = time.monotonic() + budget_s
        while len(samples) < count and (not samples or time.monotonic() < end):
            sent = time.perf_counter()
            sock.sendall(b".")
            if not sock.recv(1):
                raise OSError("it closed the connection")
            samples.append((time.perf_counter() - sent) * 1000.0)
    return samples


def stream(address: str, port: int, seconds: float) -> tuple[int, float]:
    """Send to the peer at ``address``:``port`` for ``seconds``; ``(bytes it received, seconds
    from the first byte until it confirmed them)``: the link's throughput, buffers drained."""
    with _with_peer(address, port, SINK_MODE) as sock:
        view = memoryview(_CHUNK)
        started = time.monotonic()
        end = started + seconds
        while time.monotonic() < end:
            sock.sendall(view)
        sock.shutdown(socket.SHUT_WR)
        answer = b""
        while len(answer) < _COUNT.size:
            data = sock.recv(_COUNT.size - len(answer))
            if not data:
                raise OSError("it closed before confirming the stream")
            answer += data
        elapsed = time.monotonic() - started
    return int(_COUNT.unpack(answer)[0]), elapsed
