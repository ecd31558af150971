"""The Docker cluster of ``docker/`` in a real engine, driven by ``docker/README.md``'s commands.

A private dockerd (:mod:`tests.docker.engine`) builds the worker image the README's offline way (a
``debootstrap`` base, wheels downloaded on the host, ``docker build --network none``), or reuses
the one built from the same inputs; three containers on a 198.18.0.0/15 bridge run
``cluster_specs/docker-3hosts.yaml``'s digits job over SSH from this host, their host keys pinned
through ``docker exec``. The uninterrupted run's weights are the reference: a run whose worker:1
task is killed in its container and whose node is then frozen (``docker pause``, a silent host)
must end with the very same weights. Every README block marked for the tests is run as written,
in a directory laid out as the repository is.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.docker.engine import Engine, image_key, start_engine
from tests.e2e.tfjobs import Finished
from tests.support.jobs import REPO, read_events
from tests.support.waiting import wait_until
from tests.support.wheelhouse import copy_package, wheelhouse

pytestmark = [pytest.mark.docker, pytest.mark.timeout(1800)]

README = REPO / "docker" / "README.md"
SPEC = "cluster_specs/docker-3hosts.yaml"
_BLOCK = re.compile(r"<!-- run by tests/docker: (\S+) -->\s*```sh\n(.*?)```", re.DOTALL)
#: Every block this test runs; the README marks exactly these.
BLOCKS = {"keys", "base", "wheels", "build", "start", "trust", "preflight", "run", "fresh", "kill",
          "pause", "unpause", "stop"}
IMAGE = "tfcluster-worker"
BASE = "tfcluster-base:bookworm"
NODES = ("node-a", "node-b", "node-c")
FAULT_AT_STEP = 100
#: The second fault's step, in the attempt after the first (which resumed from step 100).
PAUSE_AT_STEP = 180
RUN_TIMEOUT_S = 400


def readme_blocks() -> dict[str, str]:
    return {name: body for name, body in _BLOCK.findall(README.read_text())}


def test_the_readme_marks_exactly_the_commands_this_test_runs() -> None:
    blocks = readme_blocks()
    assert set(blocks) == BLOCKS
    assert "tfcluster run " + SPEC in blocks["run"]


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


def build_image(cluster: Cluster) -> None:
    """The worker image for these inputs: the cached one, or built the README's offline way."""
    engine, cached = cluster.engine, f"{IMAGE}:{image_key()}"
    if engine.run("image", "inspect", cached, check=False).returncode != 0:
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


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    tmp = tmp_path_factory.mktemp("docker")
    with start_engine(tmp / "dockerd.log") as engine:
        work = tmp / "work"
        lay_out(work)
        bin_dir = tmp / "bin"  # `docker` is the engine's own CLI; tfcluster the one under test
        bin_dir.mkdir()
        (bin_dir / "docker").symlink_to(engine.docker)
        env = {**engine.env, "PATH": os.pathsep.join(
            [str(bin_dir), str(Path(sys.executable).parent), engine.env.get("PATH", "")])}
        ready = Cluster(engine, work, env, readme_blocks())
        started = time.monotonic()
        build_image(ready)
        print(f"\nworker image ready in {time.monotonic() - started:.0f}s", file=sys.stderr)
        ready.sh("keys")
        try:
            ready.sh("start", timeout=600)
            for node in NODES:  # made by the entrypoint at start
                wait_until(lambda node=node: engine.run(  # type: ignore[misc]
                    "exec", node, "test", "-s", "/etc/ssh/host_keys/ssh_host_ed25519_key.pub",
                    check=False).returncode == 0, timeout=120, what=f"{node}'s host key",
                    poll_s=0.5)
            ready.sh("trust")
            ready.sh("preflight", timeout=120)
            print(f"cluster up in {time.monotonic() - started:.0f}s", file=sys.stderr)
            yield ready
        finally:
            subprocess.run(["bash", "-c", ready.blocks["unpause"]], cwd=work, env=env,
                           capture_output=True, check=False, timeout=60)
            ready.sh("stop", timeout=300)


@pytest.fixture(scope="module")
def reference(cluster: Cluster) -> Finished:
    process, run_dir = cluster.start_run()
    return cluster.finish(process, run_dir)


def test_the_digits_job_runs_over_ssh_on_the_three_containers(reference: Finished) -> None:
    assert reference.exit_code == 0, reference.stderr[-3000:]
    started = {e["task"]: e["host"] for e in reference.events if e["event"] == "task_started"}
    assert started == {"chief:0": "node-a", "worker:0": "node-b", "worker:1": "node-c"}
    assert reference.last_attempt() == 0
    reference.final_hash()


def wait_for_step(cluster: Cluster, process: subprocess.Popen[str], run_dir: Path, step: int,
                  attempt: int) -> None:
    def reached() -> bool:
        return process.poll() is not None or any(
            e["event"] == "task_progress" and e["attempt"] == attempt and e["step"] >= step
            for e in read_events(run_dir))
    wait_until(reached, timeout=RUN_TIMEOUT_S, what=f"step {step} of attempt {attempt}",
               poll_s=0.2)
    assert process.poll() is None, f"the job ended before step {step} of attempt {attempt}"


def test_a_task_killed_then_a_node_paused_and_the_job_ends_with_the_same_weights(
        cluster: Cluster, reference: Finished) -> None:
    """One run, two faults: worker:1 killed in its container (the job restarts from the chief's
    checkpoint), then its node frozen (a silent host: noticed by its missing heartbeats, the
    restart waits for it to come back); the weights are the uninterrupted run's."""
    process, run_dir = cluster.start_run()
    wait_for_step(cluster, process, run_dir, FAULT_AT_STEP, attempt=0)
    cluster.sh("kill")
    wait_for_step(cluster, process, run_dir, PAUSE_AT_STEP, attempt=1)
    cluster.sh("pause")
    try:
        wait_until(lambda: process.poll() is not None or any(
            e["event"] == "task_failed" and e["attempt"] == 1 for e in read_events(run_dir)),
            timeout=120, what="the paused node noticed", poll_s=0.2)
    finally:
        cluster.sh("unpause")
    done = cluster.finish(process, run_dir)
    assert done.exit_code == 0, done.stderr[-3000:]
    failed = [e for e in done.events if e["event"] == "task_failed"]
    assert failed and (failed[0]["task"], failed[0]["attempt"]) == ("worker:1", 0), failed
    assert any(e["attempt"] == 1 for e in failed), failed
    assert done.last_attempt() >= 2
    assert done.final_hash() == reference.final_hash()
