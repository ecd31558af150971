"""Where a remote host is reached: the spec's hosts entry over ~/.ssh/config (pure, no network)."""

from __future__ import annotations

import os

import paramiko
import pytest

from launcher.ssh.config import (
    DEFAULT_GLOBAL_KNOWN_HOSTS,
    SshHost,
    SshTarget,
    parse_jump,
    resolve_target,
)
from launcher.ssh.errors import SshConfigError

CONFIG = """\
Host node-a
    HostName 10.0.0.5
    User cfguser
    Port 2222
    IdentityFile ~/.ssh/id_cfg
    IdentityFile /keys/second
    UserKnownHostsFile ~/kh_one /kh_two
    GlobalKnownHostsFile /etc/kh_global

Host behind
    HostName 10.1.0.7
    ProxyJump jumper@bastion:2200

Host bastion
    HostName bastion.example.com
    User bastion-user
    IdentityFile /keys/bastion

Host chained
    ProxyJump first,second:23

Host proxied
    ProxyCommand nc %h %p

Host aliased
    HostKeyAlias shared-name
    IdentitiesOnly yes
    IdentityFile /keys/only
"""


def host(name: str = "node-a", *, address: str | None = None, user: str | None = None,
         port: int = 22, identity_file: str | None = None,
         known_hosts: str | None = None) -> SshHost:
    return SshHost(name=name, address=address or name, user=user, ssh_port=port,
                   identity_file=identity_file, known_hosts=known_hosts)


def resolve(plan: SshHost, text: str = CONFIG) -> SshTarget:
    return resolve_target(plan, paramiko.SSHConfig.from_text(text), local_user="me")


def home(path: str) -> str:
    return os.path.expanduser(path)


def test_ssh_config_applies_when_the_spec_sets_nothing() -> None:
    target = resolve(host())
    assert (target.hostname, target.port, target.user) == ("10.0.0.5", 2222, "cfguser")
    assert target.identity_files == (home("~/.ssh/id_cfg"), "/keys/second")
    assert target.known_hosts == (home("~/kh_one"), "/kh_two")
    assert target.global_known_hosts == ("/etc/kh_global",)
    assert target.default_identities == ()  # explicit identity files: no default ones


@pytest.mark.parametrize(("override", "field", "expected"), [
    ({"address": "192.0.2.9"}, "hostname", "192.0.2.9"),
    ({"port": 2022}, "port", 2022),
    ({"user": "specuser"}, "user", "specuser"),
    ({"identity_file": "~/spec_key"}, "identity_files", ("~/spec_key",)),
    ({"known_hosts": "/spec/kh"}, "known_hosts", ("/spec/kh",)),
    ({"known_hosts": "/spec/kh"}, "global_known_hosts", ()),  # only the spec's file is read
])
def test_every_spec_field_wins_over_the_ssh_config(override: dict[str, object], field: str,
                                                   expected: object) -> None:
    if isinstance(expected, tuple):  # "~" is this test's HOME, known only once it runs
        expected = tuple(home(p) for p in expected)
    assert getattr(resolve(host(**override)), field) == expected  # type: ignore[arg-type]


def test_a_spec_port_22_cannot_be_told_from_the_default_so_the_config_port_applies() -> None:
    assert resolve(host(port=22)).port == 2222


def test_defaults_without_any_ssh_config() -> None:
    target = resolve(host("node-z"), "")
    assert (target.hostname, target.port, target.user) == ("node-z", 22, "me")
    assert target.identity_files == ()
    assert target.default_identities == tuple(
        home(p) for p in ("~/.ssh/id_ed25519", "~/.ssh/id_ecdsa", "~/.ssh/id_rsa"))
    assert target.known_hosts == (home("~/.ssh/known_hosts"), home("~/.ssh/known_hosts2"))
    assert target.global_known_hosts == DEFAULT_GLOBAL_KNOWN_HOSTS
    assert target.jumps == ()


@pytest.mark.parametrize(("hostname", "port", "alias", "expected"), [
    ("Node-A.example.com", 22, None, "node-a.example.com"),
    ("127.0.0.1", 2222, None, "[127.0.0.1]:2222"),
    ("10.0.0.5", 22, "Shared", "shared"),
    ("10.0.0.5", 2200, "shared", "[shared]:2200"),
])
def test_host_keys_are_filed_under_host_or_bracketed_host_and_port(
        hostname: str, port: int, alias: str | None, expected: str) -> None:
    target = SshTarget(name="n", hostname=hostname, port=port, user="u", host_key_alias=alias)
    assert target.known_hosts_name == expected


def test_proxyjump_hops_are_resolved_through_the_config_too() -> None:
    target = resolve(host("behind", known_hosts="/spec/kh"))
    assert target.hostname == "10.1.0.7"
    (hop,) = target.jumps
    assert (hop.hostname, hop.port, hop.user) == ("bastion.example.com", 2200, "jumper")
    assert hop.identity_files == ("/keys/bastion",)
    assert hop.known_hosts == ("/spec/kh",)  # hops are checked against the same files
    assert target.describe() == "me@10.1.0.7:22 via jumper@bastion.example.com:2200"


def test_a_proxyjump_chain_keeps_its_order() -> None:
    target = resolve(host("chained"))
    assert [(j.hostname, j.port) for j in target.jumps] == [("first", 22), ("second", 23)]


def test_proxycommand_is_refused_rather_than_ignored() -> None:
    with pytest.raises(SshConfigError, match="ProxyCommand"):
        resolve(host("proxied"))


def test_identities_only_and_host_key_alias_are_read() -> None:
    target = resolve(host("aliased"))
    assert target.identities_only
    assert target.known_hosts_name == "shared-name"


@pytest.mark.parametrize(("hop", "expected"), [
    ("bastion", (None, "bastion", None)),
    ("user@bastion:2200", ("user", "bastion", 2200)),
    ("ssh://user@bastion:2200", ("user", "bastion", 2200)),
    ("[2001:db8::1]:2200", (None, "2001:db8::1", 2200)),
])
def test_parse_jump(hop: str, expected: tuple[str | None, str, int | None]) -> None:
    assert parse_jump(hop) == expected
