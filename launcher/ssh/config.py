"""Where and as whom to connect to a host: the spec's ``hosts`` entry over ``~/.ssh/config``.

Resolution is pure given a parsed config (``paramiko.SSHConfig``), so tests can table it. The host's
spec name is looked up in the ssh config exactly as ``ssh NAME`` would; then every field the spec
sets wins over the config, as if given on ssh's command line (``-o HostName=ADDRESS -p PORT -l USER
-i IDENTITY_FILE -o UserKnownHostsFile=KNOWN_HOSTS``):

============== ========================= ============================== ==========================
field          spec (wins when set)      ~/.ssh/config                  default
============== ========================= ============================== ==========================
hostname       ``address``               ``HostName``                   the spec name
port           ``port`` (when not 22)    ``Port``                       22
user           ``user``                  ``User``                       the local user
identity files ``identity_file``         ``IdentityFile`` (all, in      ~/.ssh/id_ed25519,
                                         order)                         id_ecdsa, id_rsa
known_hosts    ``known_hosts`` (only     ``UserKnownHostsFile`` and     ~/.ssh/known_hosts(2) and
               that file)                ``GlobalKnownHostsFile``       /etc/ssh/ssh_known_hosts(2)
jump hosts     -                         ``ProxyJump`` (each hop is     none
                                         looked up in the config too)
============== ========================= ============================== ==========================

A spec ``port: 22`` cannot be told from the default, so a config ``Port`` applies then. Also read
from the config: ``IdentitiesOnly`` (no ssh-agent keys besides the identity files) and
``HostKeyAlias``. ``StrictHostKeyChecking`` is ignored: only ``--accept-new-host-keys`` relaxes
host key checking, and never for a changed key. ``ProxyCommand`` is refused (use ``ProxyJump``).
"""

from __future__ import annotations

import dataclasses
import getpass
import os
import re
from dataclasses import dataclass

import paramiko

from launcher.netaddr import format_address
from launcher.ssh.errors import SshConfigError

DEFAULT_PORT = 22
DEFAULT_IDENTITIES = ("~/.ssh/id_ed25519", "~/.ssh/id_ecdsa", "~/.ssh/id_rsa")
DEFAULT_KNOWN_HOSTS = ("~/.ssh/known_hosts", "~/.ssh/known_hosts2")
DEFAULT_GLOBAL_KNOWN_HOSTS = ("/etc/ssh/ssh_known_hosts", "/etc/ssh/ssh_known_hosts2")
USER_CONFIG = "~/.ssh/config"
_MAX_JUMPS = 8
_JUMP = re.compile(r"^(?:ssh://)?(?:(?P<user>[^@]+)@)?(?:\[(?P<v6>[^\]]+)\]|(?P<host>[^:]+))"
                   r"(?::(?P<port>\d+))?$")


@dataclass(frozen=True)
class SshHost:
    """A remote host as the spec declares it: the fields that win over ``~/.ssh/config``."""

    name: str
    address: str
    user: str | None = None
    ssh_port: int = DEFAULT_PORT
    identity_file: str | None = None
    known_hosts: str | None = None


@dataclass(frozen=True)
class SshTarget:
    """One SSH endpoint, fully resolved: what :func:`launcher.ssh.connect.connect` needs."""

    name: str  # the spec's host name: what messages call it
    hostname: str  # where to connect
    port: int
    user: str
    #: Explicit identity files (expanded), tried in order; empty: the default ones, if present.
    identity_files: tuple[str, ...] = ()
    identities_only: bool = False
    #: Files read for host keys; an accepted new key is appended to the first one.
    known_hosts: tuple[str, ...] = ()
    #: Read-only host key files (the system-wide ones).
    global_known_hosts: tuple[str, ...] = ()
    host_key_alias: str | None = None
    #: Hosts to hop through, in order (ProxyJump), each reached through the previous one.
    jumps: tuple[SshTarget, ...] = ()

    @property
    def address(self) -> str:
        return format_address(self.hostname, self.port)

    @property
    def known_hosts_name(self) -> str:
        """The name host keys are filed under: ``host`` on port 22, else ``[host]:port``."""
        name = (self.host_key_alias or self.hostname).lower()
        return name if self.port == DEFAULT_PORT else f"[{name}]:{self.port}"

    @property
    def default_identities(self) -> tuple[str, ...]:
        return () if self.identity_files else tuple(expand(p) for p in DEFAULT_IDENTITIES)

    def describe(self) -> str:
        via = "".join(f" via {j.user}@{j.address}" for j in self.jumps)
        return f"{self.user}@{self.address}{via}"


def expand(path: str) -> str:
    return os.path.expanduser(path)


def load_ssh_config(path: str = USER_CONFIG) -> paramiko.SSHConfig:
    """The user's ssh config (empty when the file does not exist)."""
    full = expand(path)
    if not os.path.exists(full):
        return paramiko.SSHConfig()
    try:
        return paramiko.SSHConfig.from_path(full)
    except (OSError, paramiko.ConfigParseError) as exc:
        raise SshConfigError("ssh config", f"cannot read {full}: {exc}",
                             "fix or move that file; tfcluster reads it like ssh does") from exc


def _lookup(config: paramiko.SSHConfig, host: str, name: str) -> paramiko.SSHConfigDict:
    try:
        return config.lookup(host)
    except (paramiko.SSHException, ImportError, ValueError, OSError) as exc:
        raise SshConfigError(name, f"looking up {host!r} in the ssh config failed: {exc}") from exc


def _files(value: str | None) -> tuple[str, ...]:
    return tuple(expand(p) for p in value.split()) if value else ()


def _port(value: str | None, name: str) -> int | None:
    if value is None:
        return None
    try:
        port = int(value)
    except ValueError:
        raise SshConfigError(name, f"Port {value!r} is not a number") from None
    if not 0 < port < 65536:
        raise SshConfigError(name, f"Port {port} is out of range")
    return port


def resolve_target(host: SshHost, config: paramiko.SSHConfig,
                   local_user: str | None = None) -> SshTarget:
    """The endpoint for a remote ``host``: spec fields over the ssh config."""
    local_user = local_user or getpass.getuser()
    options = _lookup(config, host.name, host.name)
    if options.get("proxycommand"):
        raise SshConfigError(host.name, "ProxyCommand is not supported",
                             "use ProxyJump in ~/.ssh/config instead")
    explicit_address = host.address if host.address != host.name else None
    known_hosts: tuple[str, ...]
    global_known: tuple[str, ...]
    if host.known_hosts:
        known_hosts, global_known = (expand(host.known_hosts),), ()
    else:
        known_hosts = _files(options.get("userknownhostsfile")) or tuple(
            expand(p) for p in DEFAULT_KNOWN_HOSTS)
        global_known = _files(options.get("globalknownhostsfile")) or DEFAULT_GLOBAL_KNOWN_HOSTS
    identities = ((expand(host.identity_file),) if host.identity_file
                  else tuple(expand(p) for p in options.get("identityfile", [])))
    target = SshTarget(
        name=host.name,
        hostname=explicit_address or options.get("hostname", host.name),
        port=host.ssh_port if host.ssh_port != DEFAULT_PORT
        else _port(options.get("port"), host.name) or DEFAULT_PORT,
        user=host.user or options.get("user") or local_user,
        identity_files=identities,
        identities_only=options.as_bool("identitiesonly") if "identitiesonly" in options
        else False,
        known_hosts=known_hosts,
        global_known_hosts=global_known,
        host_key_alias=options.get("hostkeyalias"),
    )
    jump = options.get("proxyjump")
    if jump and jump.lower() != "none":
        hops = tuple(_jump_target(hop.strip(), target, config, local_user)
                     for hop in jump.split(","))
        if len(hops) > _MAX_JUMPS:
            raise SshConfigError(host.name, f"ProxyJump has more than {_MAX_JUMPS} hops")
        target = dataclasses.replace(target, jumps=hops)
    return target


def parse_jump(hop: str) -> tuple[str | None, str, int | None]:
    """``[ssh://][user@]host[:port]`` (``[v6]:port`` too) -> (user, host, port)."""
    found = _JUMP.match(hop)
    if not found:
        raise ValueError(f"not a ProxyJump hop: {hop!r}")
    port = found.group("port")
    return found.group("user"), found.group("v6") or found.group("host"), (
        int(port) if port else None)


def _jump_target(hop: str, final: SshTarget, config: paramiko.SSHConfig,
                 local_user: str) -> SshTarget:
    """A ProxyJump hop: its own config entry (HostName, User, Port, IdentityFile) under what the
    hop string says (the hop's own ProxyJump is not followed: the chain is explicit). Without an
    IdentityFile of its own it offers the final host's; it checks host keys against the same files
    as the final host."""
    try:
        user, host, port = parse_jump(hop)
    except ValueError as exc:
        raise SshConfigError(final.name, str(exc)) from None
    options = _lookup(config, host, final.name)
    return SshTarget(
        name=f"{final.name} (jump host {host})",
        hostname=options.get("hostname", host),
        port=port or _port(options.get("port"), final.name) or DEFAULT_PORT,
        user=user or options.get("user") or local_user,
        identity_files=tuple(expand(p) for p in options.get("identityfile", []))
        or final.identity_files,
        identities_only=final.identities_only,
        known_hosts=final.known_hosts,
        global_known_hosts=final.global_known_hosts,
        host_key_alias=options.get("hostkeyalias"),
    )
