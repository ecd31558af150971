"""A Docker engine of the tests' own, and the cache of the worker image it builds.

:func:`start_engine` runs a private ``dockerd``: its own socket and exec root, no default bridge
(``--bridge=none``: no docker0 to collide with another Docker's or to be left behind; the
cluster's own bridge is in 198.18.0.0/15), the copying ``vfs`` storage driver (no overlay mounts
needed) and no iptables rules, so nothing of the host's network or of another Docker on the
machine is touched. Its data
root (:data:`DATA_ROOT`) outlives the run: it holds the images only, so the next run (a fresh
clone's too) finds the worker image built for the same inputs (:func:`image_key`) and skips the
build. Everything else a test makes (containers, networks, volumes) is removed with the daemon.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import signal
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from tests.support.jobs import REPO
from tests.support.tiers import skip_tier
from tests.support.waiting import wait_until
from tests.support.wheelhouse import PACKAGE_FILES

DATA_ROOT = Path("/var/lib/tfcluster-test-docker")
RUN_ROOT = Path("/run/tfcluster-test-docker")
#: What the worker image is built from: its hash names the cached image.
IMAGE_INPUTS = (*PACKAGE_FILES, "docker/Dockerfile", "docker/Dockerfile.dockerignore",
                "docker/sshd_config", "docker/entrypoint.sh", "docker/README.md")


@dataclass(frozen=True)
class Engine:
    """A running private dockerd: ``env`` points the ``docker`` CLI at it (``DOCKER_HOST``)."""

    docker: str
    env: dict[str, str]

    def run(self, *args: str, timeout: float = 120, check: bool = True,
            cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
        done = subprocess.run([self.docker, *args], env=self.env, cwd=cwd, capture_output=True,
                              text=True, timeout=timeout, check=False)
        if check and done.returncode != 0:
            raise RuntimeError(f"docker {' '.join(args)} exited {done.returncode}: "
                               f"{done.stderr.strip()[-2000:]}")
        return done

    def remove_everything_but_images(self) -> None:
        """Remove every container, network and volume of this daemon (its images stay)."""
        containers = self.run("ps", "-aq", check=False).stdout.split()
        if containers:
            self.run("unpause", *containers, check=False)
            self.run("rm", "-f", "-v", *containers, check=False, timeout=300)
        self.run("network", "prune", "-f", check=False)
        self.run("volume", "prune", "-f", check=False)


def docker_cli() -> str:
    """The docker client matching Debian's engine (its own CLI), else any on PATH."""
    for candidate in ("/usr/bin/docker", shutil.which("docker")):
        if candidate and os.access(candidate, os.X_OK):
            return candidate
    skip_tier("no docker CLI (apt-get install docker.io)")


def require_engine() -> None:
    """Skip (fail under TFCLUSTER_TESTS_REQUIRE_ALL_TIERS=1) unless a private dockerd can run."""
    if os.geteuid() != 0:
        skip_tier("the Docker tests start their own dockerd (root)")
    for tool in ("dockerd", "debootstrap"):
        if shutil.which(tool) is None and not os.access(f"/usr/sbin/{tool}", os.X_OK):
            skip_tier(f"{tool} is not installed (make sysdeps: apt-get install docker.io debootstrap)")


@contextlib.contextmanager
def start_engine(log: Path) -> Iterator[Engine]:
    """A private dockerd for the block; on the way out every container, network and volume it
    has is removed and the daemon stopped, whatever happened."""
    require_engine()
    RUN_ROOT.mkdir(parents=True, exist_ok=True)
    DATA_ROOT.mkdir(parents=True, exist_ok=True)
    socket = RUN_ROOT / "docker.sock"
    pidfile = RUN_ROOT / "dockerd.pid"
    _stop_leftover(pidfile)
    env = {**os.environ, "DOCKER_HOST": f"unix://{socket}"}
    dockerd = shutil.which("dockerd") or "/usr/sbin/dockerd"
    with log.open("ab") as out:
        daemon = subprocess.Popen(
            [dockerd, "--data-root", str(DATA_ROOT), "--exec-root", str(RUN_ROOT / "exec"),
             "--pidfile", str(pidfile), "-H", f"unix://{socket}", "--storage-driver", "vfs",
             "--bridge=none", "--iptables=false", "--ip6tables=false", "--ip-masq=false"],
            stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    engine = Engine(docker_cli(), env)
    try:
        wait_until(lambda: daemon.poll() is not None or engine.run("info", check=False).returncode == 0,
                 timeout=60, what="the private dockerd answering", poll_s=0.2)
        if daemon.poll() is not None:
            raise RuntimeError(f"dockerd exited {daemon.returncode}: {log.read_text()[-2000:]}")
        engine.remove_everything_but_images()  # what a killed run may have left
        yield engine
    finally:
        with contextlib.suppress(Exception):
            engine.remove_everything_but_images()
        if daemon.poll() is None:
            daemon.terminate()
            try:
                daemon.wait(timeout=60)
            except subprocess.TimeoutExpired:
                daemon.kill()
                daemon.wait(timeout=30)


def _stop_leftover(pidfile: Path) -> None:
    """Stop the private dockerd a killed earlier run left (its pid file names it)."""
    try:
        pid = int(pidfile.read_text().strip())
        os.kill(pid, signal.SIGTERM)
    except (OSError, ValueError):
        return
    wait_until(lambda: not Path(f"/proc/{pid}").exists(), timeout=60, what=f"old dockerd {pid} gone",
               poll_s=0.2)


def image_key() -> str:
    """The hash of every file the worker image is made of (and of the base's recipe, in the
    README): the cached image's tag."""
    digest = hashlib.sha256()
    for name in IMAGE_INPUTS:
        path = REPO / name
        files = sorted(p for p in path.rglob("*") if p.is_file()
                       and "__pycache__" not in p.parts) if path.is_dir() else [path]
        for file in files:
            digest.update(str(file.relative_to(REPO)).encode() + b"\0" + file.read_bytes() + b"\0")
    return digest.hexdigest()[:16]
