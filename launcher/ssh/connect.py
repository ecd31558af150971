"""One authenticated SSH connection to a resolved :class:`~launcher.ssh.config.SshTarget`.

:func:`connect` does what ``ssh`` does before it runs anything, in the same order and with the
same refusals:

1. TCP connect (through ProxyJump hops as ``direct-tcpip`` channels when configured), each try
   bounded by the connect timeout; only a refused or timed-out connection is retried, with
   backoff;
2. key exchange, asking first for the host key types on file (:mod:`launcher.ssh.known_hosts`);
3. host key check: an unknown key is refused unless ``accept_new_host_keys`` (then recorded), a
   changed or revoked one always;
4. public key authentication (:mod:`launcher.ssh.auth`): every key tried and why it failed ends
   up in the :class:`~launcher.ssh.errors.AuthenticationError`.

paramiko's ``SSHClient`` is not used: it prefers only one known key type, treats a key of an
unlisted type as "missing", rewrites whole known_hosts files and cannot say which keys it tried.
"""

from __future__ import annotations

import contextlib
import logging
import socket
import threading
import time
from dataclasses import dataclass

import paramiko

from launcher.ssh import known_hosts
from launcher.ssh.auth import MIN_TIMEOUT_S, authenticate
from launcher.ssh.config import SshTarget
from launcher.ssh.deadline import DEFAULT_CONNECT_TIMEOUT_S, Deadline
from launcher.ssh.errors import (
    ChangedHostKeyError,
    HandshakeError,
    RemoteCommandError,
    RevokedHostKeyError,
    UnknownHostKeyError,
    UnreachableError,
)
from launcher.ssh.known_hosts import HostKeyStatus, Verdict

DEFAULT_TRIES = 3
#: How much longer than tfcluster's own wait paramiko's banner and handshake timers run.
HANDSHAKE_TIMER_MARGIN_S = 1.0
#: Longest a remote command run by tfcluster (a pre-flight probe) may take, seconds.
COMMAND_TIMEOUT_S = 60.0
#: How much of a remote command's output is read at a time, bytes.
READ_CHUNK_BYTES = 32768
DEFAULT_BACKOFF_S = 0.5
#: paramiko sends an SSH keepalive after this much silence (NAT tables, idle firewalls).
KEEPALIVE_S = 15
#: TCP keepalive: a host that vanished without a FIN/RST is noticed after about 15 + 3 * 5 s.
_TCP_KEEPALIVE = (15, 5, 3)
#: Unacknowledged data older than this drops the connection (Linux TCP_USER_TIMEOUT, ms).
_TCP_USER_TIMEOUT_MS = 45_000

# paramiko logs tracebacks at ERROR level on failed connections; our errors say what happened.
logging.getLogger("paramiko").addHandler(logging.NullHandler())


@dataclass(frozen=True)
class ConnectOptions:
    timeout_s: float = DEFAULT_CONNECT_TIMEOUT_S
    tries: int = DEFAULT_TRIES
    backoff_s: float = DEFAULT_BACKOFF_S
    accept_new_host_keys: bool = False


@dataclass(frozen=True)
class HostKeyInfo:
    name: str
    key_type: str
    fingerprint: str
    recorded_in: str | None  # the known_hosts file it was appended to (--accept-new-host-keys)


class SshConnection:
    """An authenticated transport (plus the jump connections under it). ``close()`` is safe to
    call more than once and from any thread."""

    def __init__(self, target: SshTarget, transport: paramiko.Transport, host_key: HostKeyInfo,
                 jumps: list[SshConnection]) -> None:
        self.target = target
        self.transport = transport
        self.host_key = host_key
        self._jumps = jumps

    @property
    def active(self) -> bool:
        return self.transport.is_active()

    def open_session(self, deadline: Deadline) -> paramiko.Channel:
        try:
            return self.transport.open_session(timeout=deadline.left(DEFAULT_CONNECT_TIMEOUT_S))
        except (paramiko.SSHException, OSError) as exc:
            raise RemoteCommandError(self.target.name, f"cannot open a session: {exc}",
                                     f"cannot open an SSH session on {self.target.address}: "
                                     f"{exc}") from exc

    def exec(self, channel: paramiko.Channel, command: str, timeout_s: float) -> None:
        """``channel.exec_command`` with a bound: paramiko waits for the host's answer forever, so
        a host that never gives one has its connection closed after ``timeout_s``."""
        watchdog = threading.Timer(timeout_s, self.close)
        watchdog.daemon = True
        watchdog.start()
        try:
            channel.exec_command(command)
        except (paramiko.SSHException, OSError, EOFError) as exc:
            what = (f"no answer within {timeout_s:.1f}s" if watchdog.finished.is_set()
                    else str(exc) or type(exc).__name__)
            raise RemoteCommandError(self.target.name, f"cannot run a command: {what}",
                                     f"running a command on {self.target.address}: {what}"
                                     ) from exc
        finally:
            watchdog.cancel()

    def run(self, command: str, deadline: Deadline,
            cap_s: float = COMMAND_TIMEOUT_S) -> CommandResult:
        """Run ``command`` (a shell string) and collect its output; bounded by the deadline."""
        channel = self.open_session(deadline)
        with contextlib.closing(channel):
            channel.settimeout(deadline.left(cap_s))
            self.exec(channel, command, deadline.left(cap_s))
            try:
                channel.shutdown_write()
                stdout, stderr = _drain(channel)
                if not channel.status_event.wait(deadline.left(cap_s)):
                    raise TimeoutError("no exit status")
            except (TimeoutError, paramiko.SSHException, OSError) as exc:
                what = "timed out" if isinstance(exc, TimeoutError) else str(exc)
                raise RemoteCommandError(self.target.name, f"remote command {what}",
                                         f"running a command on {self.target.address}: {what}",
                                         ) from exc
            return CommandResult(channel.exit_status, stdout, stderr)

    def close(self) -> None:
        self.transport.close()
        for jump in reversed(self._jumps):
            jump.close()


@dataclass(frozen=True)
class CommandResult:
    status: int  # -1: no exit status (the connection closed first)
    stdout: bytes
    stderr: bytes


def _drain(channel: paramiko.Channel) -> tuple[bytes, bytes]:
    """Read stdout and stderr to EOF together (a full stderr window must not block stdout)."""
    out, err = bytearray(), bytearray()

    def read_stderr() -> None:
        with contextlib.suppress(OSError):
            while chunk := channel.recv_stderr(READ_CHUNK_BYTES):
                err.extend(chunk)

    reader = threading.Thread(target=read_stderr, daemon=True)
    reader.start()
    while chunk := channel.recv(READ_CHUNK_BYTES):
        out.extend(chunk)
    reader.join(channel.gettimeout())
    return bytes(out), bytes(err)


# --- connecting ----------------------------------------------------------------------------------


def connect(target: SshTarget, options: ConnectOptions,
            deadline: Deadline | None = None) -> SshConnection:
    """An authenticated connection to ``target``; raises an :class:`~launcher.ssh.errors.SshError`
    naming the host and what to do."""
    deadline = deadline or Deadline()
    jumps: list[SshConnection] = []
    try:
        sock: socket.socket | paramiko.Channel
        if target.jumps:
            first, *rest = target.jumps
            jumps.append(_establish(first, _open_socket(first, options, deadline), options,
                                    deadline, []))
            for hop in rest:
                jumps.append(_establish(hop, _tunnel(jumps[-1], hop, deadline), options,
                                        deadline, []))
            sock = _tunnel(jumps[-1], target, deadline)
        else:
            sock = _open_socket(target, options, deadline)
        return _establish(target, sock, options, deadline, jumps)
    except BaseException:
        for jump in reversed(jumps):
            jump.close()
        raise


def _tunnel(via: SshConnection, target: SshTarget, deadline: Deadline) -> paramiko.Channel:
    try:
        return via.transport.open_channel(
            "direct-tcpip", (target.hostname, target.port), ("127.0.0.1", 0),
            timeout=deadline.left(DEFAULT_CONNECT_TIMEOUT_S))
    except (paramiko.SSHException, OSError) as exc:
        raise UnreachableError(target.name, f"{target.address} (via {via.target.address})",
                               str(exc) or type(exc).__name__) from exc


def _open_socket(target: SshTarget, options: ConnectOptions, deadline: Deadline) -> socket.socket:
    tries = 0
    while True:
        tries += 1
        timeout = deadline.left(options.timeout_s)
        try:
            if timeout <= 0:
                raise TimeoutError("timed out")
            sock = socket.create_connection((target.hostname, target.port), timeout=timeout)
        except socket.gaierror as exc:
            raise UnreachableError(target.name, target.address,
                                   f"cannot resolve {target.hostname!r}: {exc.strerror}") from exc
        except (ConnectionRefusedError, TimeoutError) as exc:
            error = (f"timed out after {timeout:.1f}s" if isinstance(exc, TimeoutError)
                     else f"[Errno {exc.errno}] {exc.strerror}")
            pause = options.backoff_s * 2 ** (tries - 1)
            if tries >= options.tries or deadline.left(pause + MIN_TIMEOUT_S) < pause + MIN_TIMEOUT_S:
                raise UnreachableError(target.name, target.address, error, tries) from exc
            time.sleep(pause)  # backoff between tries, not synchronisation
            continue
        except OSError as exc:  # no route, network down...: trying again will not help
            raise UnreachableError(target.name, target.address,
                                   f"[Errno {exc.errno}] {exc.strerror}") from exc
        _tune(sock)
        return sock


def _tune(sock: socket.socket) -> None:
    with contextlib.suppress(OSError, AttributeError):
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
        idle, interval, count = _TCP_KEEPALIVE
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE, idle)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPINTVL, interval)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPCNT, count)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_USER_TIMEOUT, _TCP_USER_TIMEOUT_MS)


def _establish(target: SshTarget, sock: socket.socket | paramiko.Channel,
               options: ConnectOptions, deadline: Deadline,
               jumps: list[SshConnection]) -> SshConnection:
    transport = paramiko.Transport(sock)
    try:
        entries = known_hosts.load([*target.known_hosts, *target.global_known_hosts])
        name = target.known_hosts_name
        security = transport.get_security_options()
        security.key_types = known_hosts.preferred_key_types(entries, name,
                                                              list(security.key_types))
        _handshake(transport, target, deadline, options)
        host_key = _verify_host_key(transport, target, entries, options)
        authenticate(transport, target, deadline)
        transport.set_keepalive(KEEPALIVE_S)
        return SshConnection(target, transport, host_key, jumps)
    except BaseException:
        transport.close()
        raise


def _handshake(transport: paramiko.Transport, target: SshTarget, deadline: Deadline,
               options: ConnectOptions) -> None:
    budget = deadline.left(options.timeout_s)
    # paramiko's own timers run a little longer, so that a server that says nothing is told
    # apart by the wait below ("no answer within"), not by whichever timer fires first
    timers = max(budget, MIN_TIMEOUT_S) + HANDSHAKE_TIMER_MARGIN_S
    transport.banner_timeout = transport.handshake_timeout = timers
    done = threading.Event()
    try:
        transport.start_client(event=done)
    except (paramiko.SSHException, OSError) as exc:
        raise HandshakeError(target.name, target.address, str(exc)) from exc
    if not done.wait(budget) or not transport.is_active():
        error = transport.get_exception()
        raise HandshakeError(target.name, target.address,
                             str(error) if error else f"no answer within {budget:.1f}s")


def _verify_host_key(transport: paramiko.Transport, target: SshTarget,
                     entries: list[known_hosts.Entry], options: ConnectOptions) -> HostKeyInfo:
    key = transport.get_remote_server_key()
    blob = key.asbytes()
    name = target.known_hosts_name
    key_type, print_ = known_hosts.blob_type(blob), known_hosts.fingerprint(blob)
    result = known_hosts.check(entries, name, blob)
    verdict = known_hosts.decide(result.status, options.accept_new_host_keys)
    if verdict is Verdict.TRUST:
        return HostKeyInfo(name, key_type, print_, None)
    about = {"name": name, "key_type": key_type, "fingerprint": print_}
    file = target.known_hosts[0] if target.known_hosts else "~/.ssh/known_hosts"
    if verdict is Verdict.RECORD:
        try:
            known_hosts.record(file, name, blob)
        except OSError as exc:
            raise UnknownHostKeyError(target.name, **about, known_hosts=file,
                                      hostname=target.hostname, port=target.port) from exc
        return HostKeyInfo(name, key_type, print_, file)
    if result.status is HostKeyStatus.REVOKED:
        raise RevokedHostKeyError(target.name, **about, revoked=result.entries[0].known_key())
    if result.status is HostKeyStatus.CHANGED:
        raise ChangedHostKeyError(target.name, **about,
                                  known=[e.known_key() for e in result.entries])
    raise UnknownHostKeyError(target.name, **about, known_hosts=file, hostname=target.hostname,
                              port=target.port)
