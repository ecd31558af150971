"""The Docker cluster's files agree with each other and with the spec that runs on them.

What can be checked without a Docker engine (tests/docker/ runs the cluster in a real one):
compose services, addresses and ports against ``cluster_specs/docker-3hosts.yaml``; the
Dockerfile installs this package with its ``tf`` extra from the build context and runs sshd; the
image's sshd configuration (with the real sshd when installed) and its entrypoint script.
"""

from __future__ import annotations

import ipaddress
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path, PurePosixPath
from typing import Any

import yaml

from launcher.spec.loading import load_spec
from launcher.spec.model import ClusterSpec
from tests.support.tiers import require

ROOT = Path(__file__).resolve().parents[3]
DOCKER = ROOT / "docker"
SPEC = ROOT / "cluster_specs" / "docker-3hosts.yaml"
NODES = ("node-a", "node-b", "node-c")
TEST_NETWORK = ipaddress.IPv4Network("198.18.0.0/15")
SSHD = "/usr/sbin/sshd"


# --- reading the files ---------------------------------------------------------------------------


def compose() -> dict[str, Any]:
    data = yaml.safe_load((DOCKER / "compose.yaml").read_text())
    assert isinstance(data, dict)
    return data


def services() -> dict[str, dict[str, Any]]:
    found = compose()["services"]
    assert isinstance(found, dict)
    return found


def spec() -> ClusterSpec:
    return load_spec(SPEC)


def dockerfile() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) of docker/Dockerfile, continuation lines joined, comments dropped."""
    instructions: list[tuple[str, str]] = []
    pending = ""
    for raw in (DOCKER / "Dockerfile").read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        line, pending = pending + line, ""
        keyword, _, rest = line.partition(" ")
        instructions.append((keyword.upper(), rest.strip()))
    assert not pending, "Dockerfile ends in a continuation line"
    return instructions


def arguments(keyword: str) -> list[str]:
    return [rest for word, rest in dockerfile() if word == keyword]


def stages() -> dict[str, list[tuple[str, str]]]:
    """The instructions of each build stage, by its name (``image``: the unnamed last one)."""
    found: dict[str, list[tuple[str, str]]] = {}
    name = None
    for word, rest in dockerfile():
        if word == "FROM":
            parts = rest.split()
            name = parts[2] if len(parts) == 3 and parts[1].upper() == "AS" else "image"
            found[name] = []
        elif name is not None:
            found[name].append((word, rest))
    return found


def copies(instructions: list[tuple[str, str]] | None = None) -> list[tuple[list[str], str]]:
    """(sources, destination) of every COPY from the build context (of every stage, or of
    ``instructions``); ``COPY --from=<stage>`` is not from the context."""
    found = []
    for word, rest in dockerfile() if instructions is None else instructions:
        if word != "COPY" or rest.startswith("--from="):
            continue
        words = [w for w in shlex.split(rest) if not w.startswith("--")]
        found.append((words[:-1], words[-1]))
    return found


def bind_mounts(run: str) -> list[dict[str, str]]:
    """The ``--mount=type=bind,...`` options of a RUN instruction's arguments, each as its
    ``key=value`` pairs (a flag such as ``rw`` maps to "")."""
    found = []
    for word in shlex.split(run):
        if not word.startswith("--mount="):
            break  # the options come first
        fields = dict(part.partition("=")[::2] for part in word[len("--mount="):].split(","))
        if fields.get("type") == "bind":
            found.append(fields)
    return found


def context_reads() -> list[str]:
    """Every path the build reads from its context: the sources of COPY, and of the bind mounts
    that name no stage (``from=``)."""
    copied = [source for sources, _ in copies() for source in sources]
    return copied + [m["source"] for run in arguments("RUN") for m in bind_mounts(run)
                     if "from" not in m]


def mounted(run: str, source: str) -> str:
    """Where the RUN instruction ``run`` mounts ``source`` of the build context."""
    (target,) = [m["target"] for m in bind_mounts(run) if m.get("source") == source
                 and "from" not in m]
    return target


def exec_form(keyword: str) -> list[str]:
    (rest,) = arguments(keyword)
    value = yaml.safe_load(rest)  # a JSON array
    assert isinstance(value, list) and all(isinstance(v, str) for v in value), rest
    return value


def sshd_options(text: str) -> dict[str, list[str]]:
    options: dict[str, list[str]] = {}
    for line in text.splitlines():
        words = line.split("#", 1)[0].split()
        if words:
            options.setdefault(words[0].lower(), []).append(" ".join(words[1:]))
    return options


def compose_default(value: str) -> str:
    """The default of a compose ``${VAR:-default}`` value (the value itself if it has none)."""
    match = re.fullmatch(r"\$\{[A-Za-z_][A-Za-z0-9_]*:-(.*)\}", value)
    return match.group(1) if match else value


def mounts(service: dict[str, Any]) -> list[dict[str, Any]]:
    """Every volume entry of a service in the long form (type, source, target)."""
    found = []
    for entry in service.get("volumes", []):
        if isinstance(entry, str):
            source, target = entry.split(":")[:2]
            kind = "bind" if source.startswith((".", "/", "$")) else "volume"
            found.append({"type": kind, "source": source, "target": target})
        else:
            found.append(entry)
    return found


# --- compose against the spec --------------------------------------------------------------------


def test_the_spec_validates_and_places_one_task_per_node() -> None:
    cluster = spec()
    assert sorted(cluster.hosts) == list(NODES)
    placed = [(str(slot.task), slot.host, slot.port) for slot in cluster.task_slots()]
    assert placed == [("chief:0", "node-a", 23456), ("worker:0", "node-b", 23456),
                      ("worker:1", "node-c", 23456)]
    assert cluster.entrypoint.module == "worker.examples.digits"
    assert (ROOT / "worker" / "examples" / "digits.py").is_file()
    assert cluster.python == "/opt/tfcluster/bin/python"  # the image's venv (docker/Dockerfile)


def test_compose_nodes_are_the_spec_hosts_at_the_same_addresses() -> None:
    nodes, cluster = services(), spec()
    assert sorted(nodes) == list(NODES)
    (network_name,) = compose()["networks"]
    (ipam,) = compose()["networks"][network_name]["ipam"]["config"]
    subnet = ipaddress.IPv4Network(ipam["subnet"])
    gateway = ipaddress.IPv4Address(ipam["gateway"])
    assert subnet.subnet_of(TEST_NETWORK) and gateway in subnet
    addresses = []
    for name, node in nodes.items():
        address = ipaddress.IPv4Address(node["networks"][network_name]["ipv4_address"])
        assert address in subnet and address not in (gateway, subnet.network_address,
                                                     subnet.broadcast_address), name
        host = cluster.hosts[name]
        assert host.address == str(address), name
        assert (host.user, host.port) == ("tfc", 22), name
        assert "22" in [str(port) for port in node["expose"]], name
        assert node.get("hostname") == name
        addresses.append(address)
    assert len(set(addresses)) == len(addresses)


def test_every_task_port_is_exposed_on_its_node_and_no_port_is_published() -> None:
    nodes = services()
    for slot in spec().task_slots():
        assert str(slot.port) in [str(port) for port in nodes[slot.host]["expose"]], slot
    for name, node in nodes.items():
        # TensorFlow's gRPC server is unauthenticated: nothing may be published on the host.
        assert "ports" not in node, name
        assert node.get("network_mode") is None, name
    for network in compose()["networks"].values():
        assert not network.get("external"), "the nodes' network must be this project's own"


def test_checkpoints_are_on_one_named_volume_every_node_mounts() -> None:
    nodes, cluster = services(), spec()
    assert "checkpoints" in compose()["volumes"]
    targets = {name: [m["target"] for m in mounts(node)
                      if m["type"] == "volume" and m["source"] == "checkpoints"]
               for name, node in nodes.items()}
    assert all(len(found) == 1 for found in targets.values()), targets
    (target,) = {found[0] for found in targets.values()}
    assert cluster.checkpoint is not None
    assert PurePosixPath(cluster.checkpoint.dir).is_relative_to(target)
    # The image makes the mount point the tfc user's, and a fresh named volume takes that over.
    assert any(target in run and re.search(r"-o tfc\b", run) for run in arguments("RUN"))


def test_each_node_mounts_the_public_key_of_the_specs_identity_file() -> None:
    cluster = spec()
    for name, node in services().items():
        binds = [m for m in mounts(node) if m["type"] == "bind"]
        (key,) = [m for m in binds if m["target"] == "/etc/tfcluster/authorized_keys"]
        assert key.get("read_only") is True
        assert key.get("bind", {}).get("create_host_path") is False  # a missing key is an error
        source = (DOCKER / compose_default(key["source"])).resolve()
        identity = cluster.hosts[name].identity_file
        assert identity is not None
        # relative to the spec file's directory, as every relative path of a spec
        assert source == (ROOT / "cluster_specs" / f"{identity}.pub").resolve(), name
        # Per node host keys, so that re-creating a container keeps its key.
        assert any(m["target"] == "/etc/ssh/host_keys" and m["type"] == "volume"
                   for m in mounts(node)), name


def test_nodes_build_the_dockerfile_with_the_repository_as_context() -> None:
    images = set()
    for node in services().values():
        build = node["build"]
        assert (DOCKER / build["context"]).resolve() == ROOT
        assert (ROOT / build["dockerfile"]).resolve() == DOCKER / "Dockerfile"
        images.add(node["image"])
    assert len(images) == 1


# --- the image -----------------------------------------------------------------------------------


def test_dockerfile_installs_this_package_with_its_tf_extra_from_the_context() -> None:
    # The base is a build argument whose default is the public Python image users have; the
    # package's source is gathered in a stage of its own, which the step installing it mounts.
    assert arguments("FROM") == ["scratch AS source", "${BASE}"]
    defaults = dict(arg.split("=", 1) for arg in arguments("ARG") if "=" in arg)
    assert re.fullmatch(r"python:3\.11-slim(-\w+)?", defaults["BASE"]), defaults
    by_stage = stages()
    assert copies(by_stage["source"]) == [(["pyproject.toml", "README.md"], "/"),
                                          (["launcher"], "/launcher"), (["worker"], "/worker")]
    image = by_stage["image"]
    # Nothing is copied into the image's layers: its steps mount what they read.
    assert not [rest for word, rest in image if word in ("COPY", "ADD")]
    # First the dependencies, read from pyproject.toml (its own lists: nothing named a second
    # time that could drift), with the tf extra and the build requirements, from the wheels ...
    deps, package = [rest for word, rest in image if word == "RUN" and "pip install" in rest]
    assert mounted(deps, "pyproject.toml") in deps and "tomllib" in deps
    assert mounted(deps, "docker/wheels") in deps.split("--find-links", 1)[1].split()[0]
    for listed in ('p["dependencies"]', 'p["optional-dependencies"]["tf"]',
                   't["build-system"]["requires"]'):
        assert listed in deps, listed
    # ... then the package alone, after them, from the source stage mounted writable (pip builds
    # in it): a change to its code rebuilds only this step.
    (source,) = [m for m in bind_mounts(package) if m.get("from") == "source"]
    assert "rw" in source
    words = shlex.split(re.split(r"&&|;", package.split("pip install", 1)[1])[0])
    assert "--no-deps" in words and [w for w in words if not w.startswith("-")] == \
        [source["target"]]
    assert image.index(("RUN", package)) > image.index(("RUN", deps))
    pyproject = (ROOT / "pyproject.toml").read_text()
    extra = re.search(r"^tf = \[(.*?)^\]", pyproject, re.MULTILINE | re.DOTALL)
    assert extra and "tensorflow" in extra.group(1), "pyproject.toml has no tf extra with TensorFlow"


def test_every_file_the_build_reads_exists_and_the_build_context_sends_nothing_else() -> None:
    sources = context_reads()
    for source in sources:
        assert (ROOT / source).exists(), source
    ignore = [line.strip() for line in (DOCKER / "Dockerfile.dockerignore").read_text().splitlines()
              if line.strip() and not line.startswith("#")]
    assert ignore[0] == "*"
    allowed = {line[1:] for line in ignore if line.startswith("!")}
    assert set(sources) == allowed
    assert not any(entry.startswith("docker/keys") for entry in allowed)


def test_dockerfile_runs_sshd_in_the_foreground_through_the_entrypoint() -> None:
    assert exec_form("CMD") == ["/usr/sbin/sshd", "-D", "-e"]
    (entrypoint,) = exec_form("ENTRYPOINT")
    (package,) = [run for run in arguments("RUN") if "docker/entrypoint.sh" in run]
    assert re.search(rf"install -m 0755 {mounted(package, 'docker/entrypoint.sh')} {entrypoint}\b",
                     package)
    assert re.search(rf"install -m 0644 {mounted(package, 'docker/sshd_config')} "
                     r"/etc/ssh/sshd_config\b", package)
    runs = " ".join(arguments("RUN"))
    assert "openssh-server" in runs
    assert "rm -f /etc/ssh/ssh_host_" in runs  # no host key baked into the image
    assert re.search(r"useradd .*\btfc\b", runs)
    assert "22" in arguments("EXPOSE")


def test_sshd_config_allows_keys_of_user_tfc_only() -> None:
    options = sshd_options((DOCKER / "sshd_config").read_text())
    expected = {
        "passwordauthentication": "no", "kbdinteractiveauthentication": "no",
        "permitrootlogin": "no", "pubkeyauthentication": "yes",
        "authenticationmethods": "publickey", "allowusers": "tfc", "strictmodes": "yes",
        "authorizedkeysfile": "/etc/ssh/authorized_keys/%u",
        "hostkey": "/etc/ssh/host_keys/ssh_host_ed25519_key",
        "subsystem": "sftp internal-sftp",
    }
    for key, value in expected.items():
        assert options.get(key) == [value], key
    entry = (DOCKER / "entrypoint.sh").read_text()
    assert "/etc/ssh/authorized_keys/tfc" in entry and "/etc/ssh/host_keys/" in entry


def test_sshd_accepts_the_image_config(tmp_path: Path) -> None:
    require(os.access(SSHD, os.X_OK) and shutil.which("ssh-keygen") is not None,
            f"{SSHD} not installed (openssh-server)")
    key = tmp_path / "host_key"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
    os.makedirs("/run/sshd", mode=0o755, exist_ok=True)
    done = subprocess.run([SSHD, "-T", "-f", str(DOCKER / "sshd_config"), "-o", f"HostKey={key}"],
                          capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    effective = sshd_options(done.stdout)
    assert effective["passwordauthentication"] == ["no"]
    assert effective["kbdinteractiveauthentication"] == ["no"]
    assert effective["permitrootlogin"] == ["no"]
    assert effective["allowusers"] == ["tfc"]
    assert effective["authenticationmethods"] == ["publickey"]


def test_entrypoint_installs_the_mounted_key_and_keeps_its_host_key(tmp_path: Path) -> None:
    require(os.geteuid() == 0 and shutil.which("ssh-keygen") is not None,
            "the entrypoint installs files owned by root (needs root, ssh-keygen)")
    mounted, authorized = tmp_path / "mounted.pub", tmp_path / "authorized_keys"
    host_key = tmp_path / "host_keys" / "ssh_host_ed25519_key"
    host_key.parent.mkdir()
    env = {**os.environ, "TFC_MOUNTED_KEYS": str(mounted), "TFC_AUTHORIZED_KEYS": str(authorized),
           "TFC_HOST_KEY": str(host_key)}
    command = ["sh", str(DOCKER / "entrypoint.sh"), sys.executable, "-c", "print('cmd ran')"]

    missing = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
    assert missing.returncode == 1 and "no public key" in missing.stderr
    assert "cmd ran" not in missing.stdout

    mounted.write_text("ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIE6test client\n")
    mounted.chmod(0o666)  # as a bind mount might have it
    first = subprocess.run(command, env=env, capture_output=True, text=True, check=True)
    assert first.stdout.strip() == "cmd ran"
    assert authorized.read_text() == mounted.read_text()
    assert authorized.stat().st_mode & 0o777 == 0o644 and authorized.stat().st_uid == 0
    assert "SHA256:" in first.stderr
    public = host_key.with_suffix(".pub").read_text()

    subprocess.run(command, env=env, capture_output=True, text=True, check=True)
    assert host_key.with_suffix(".pub").read_text() == public  # kept, not made again
