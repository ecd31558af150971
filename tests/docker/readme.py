"""The commands of ``docker/README.md`` as the Docker tests run them: the blocks it marks for the
tests (:func:`readme_blocks`), run as written in a directory laid out as the repository is
(:func:`lay_out`, :class:`Cluster`), and the worker image built the README's offline way or taken
from the engine's cache (:func:`build_image`). Used by the tests' fixture and by the image build
the suite starts in the background (:mod:`tests.docker.prebuild`).
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from tests.docker.engine import Engine, image_key
from tests.e2e.tfjobs import Finished
from tests.support.jobs import REPO
from tests.support.waiting import wait_until
from tests.support.wheelhouse import copy_package, wheelhouse

README = REPO / "docker" / "README.md"
SPEC = "cluster_specs/docker-3hosts.yaml"
_BLOCK = re.compile(r"<!-- run by tests/docker: (\S+) -->\s*```sh\n(.*?)```", re.DOTALL)
#: Every block this test runs; the README marks exactly these.
BLOCKS = {"keys", "base", "wheels", "build", "start", "trust", "preflight", "run", "fresh", "kill",
          "pause", "unpause", "stop"}
IMAGE = "tfcluster-worker"
BASE = "tfcluster-base:bookworm"
RUN_TIMEOUT_S = 400


def readme_blocks() -> dict[str, str]:
    return {name: body for name, body in _BLOCK.findall(README.read_text())}


@dataclass
class Cluster:
    """The README's commands, run in ``work`` (laid out as the repository) on ``engine``."""

    engine: Engine
    work: Path
    env: dict[str, str]
    blocks: dict[str, str]

    def sh(self, block: str, timeout: float = 300) -> str:
        done = subprocess.run(["bash", "-euo", "pipefail", "-c", self.blocks[block]], cwd=self.work,
                              env=self.env, capture_output=True, text=True, timeout=timeout,
                              check=False)
        assert done.returncode == 0, \
            f"README block {block!r}: {done.stdout[-3000:]}\n{done.stderr[-3000:]}"
        return done.stdout

    def start_run(self) -> tuple[subprocess.Popen[str], Path]:
        """The README's ``run`` block in the background, and the run directory it made."""
        self.sh("fresh")
        before = set((self.work / "runs").glob("digits-docker-*"))
        process = subprocess.Popen(["bash", "-euo", "pipefail", "-c", self.blocks["run"]],
                                   cwd=self.work, env=self.env, stdout=subprocess.DEVNULL,
                                   stderr=subprocess.PIPE, text=True, start_new_session=True)
        new: list[Path] = []

        def made() -> bool:
            new[:] = [p for p in (self.work / "runs").glob("digits-docker-*") if p not in before]
            return bool(new) or process.poll() is not None
        wait_until(made, timeout=60, what="the run directory", poll_s=0.2)
        assert new, process.communicate()[1][-3000:]
        return process, new[0]

    def finish(self, process: subprocess.Popen[str], run_dir: Path) -> Finished:
        try:
            _, stderr = process.communicate(timeout=RUN_TIMEOUT_S)
        finally:
            if process.poll() is None:
                os.killpg(process.pid, 9)
                process.wait(timeout=30)
        return Finished(run_dir, run_dir, process.returncode, stderr)


def cluster_in(engine: Engine, tmp: Path) -> Cluster:
    """The README's commands run in ``tmp/work`` against ``engine``: ``docker`` is the engine's own
    CLI, ``tfcluster`` the one under test."""
    work = tmp / "work"
    lay_out(work)
    bin_dir = tmp / "bin"
    bin_dir.mkdir()
    (bin_dir / "docker").symlink_to(engine.docker)
    env = {**engine.env, "PATH": os.pathsep.join(
        [str(bin_dir), str(Path(sys.executable).parent), engine.env.get("PATH", "")])}
    return Cluster(engine, work, env, readme_blocks())


def build_image(cluster: Cluster) -> bool:
    """The worker image for these inputs: the cached one, or built the README's offline way
    (True: it was built now)."""
    engine, cached = cluster.engine, f"{IMAGE}:{image_key()}"
    built = engine.run("image", "inspect", cached, check=False).returncode != 0
    if built:
        # the base made by the README's recipe as it is now (an earlier recipe's is not reused)
        base = f"{BASE}-{hashlib.sha256(cluster.blocks['base'].encode()).hexdigest()[:12]}"
        if engine.run("image", "inspect", base, check=False).returncode != 0:
            cluster.sh("base", timeout=900)
            engine.run("tag", BASE, base)
            for old in engine.run("images", "--format", "{{.Repository}}:{{.Tag}}",
                                  BASE.split(":", maxsplit=1)[0]).stdout.split():
                if old not in (base, BASE):  # an earlier recipe's
                    engine.run("rmi", old, check=False)
        engine.run("tag", base, BASE)
        wheels = cluster.work / "docker" / "wheels"
        for wheel in wheelhouse("tf").glob("*.whl"):  # already downloaded: pip keeps them
            os.link(wheel, wheels / wheel.name)
        cluster.sh("wheels", timeout=900)
        cluster.sh("build", timeout=1200)
        engine.run("tag", IMAGE, cached)
        refs = engine.run("images", "--format", "{{.Repository}}:{{.Tag}}", IMAGE).stdout.split()
        for old in set(refs) - {cached, f"{IMAGE}:latest"}:  # images of earlier inputs
            engine.run("rmi", old, check=False)
    engine.run("tag", cached, IMAGE)
    return built


def lay_out(work: Path) -> None:
    """The files the README's commands read, where a clone has them."""
    copy_package(work)
    (work / "docker" / "keys").mkdir(parents=True)
    (work / "docker" / "wheels").mkdir()
    for name in ("Dockerfile", "Dockerfile.dockerignore", "sshd_config", "entrypoint.sh",
                 "README.md"):
        shutil.copy2(REPO / "docker" / name, work / "docker" / name)
    (work / "cluster_specs").mkdir()
    shutil.copy2(REPO / SPEC, work / SPEC)
    (work / "runs").mkdir()
