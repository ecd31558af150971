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

import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.docker import prebuild
from tests.docker.engine import start_engine
from tests.docker.readme import (
    BLOCKS,
    RUN_TIMEOUT_S,
    SPEC,
    Cluster,
    build_image,
    cluster_in,
    readme_blocks,
)
from tests.e2e.tfjobs import Finished
from tests.support.jobs import read_events
from tests.support.waiting import wait_until

pytestmark = [pytest.mark.docker, pytest.mark.timeout(1800)]

NODES = ("node-a", "node-b", "node-c")
FAULT_AT_STEP = 100
#: The second fault's step, in the attempt after the first (which resumed from step 100).
PAUSE_AT_STEP = 180


def test_the_readme_marks_exactly_the_commands_this_test_runs() -> None:
    blocks = readme_blocks()
    assert set(blocks) == BLOCKS
    assert "tfcluster run " + SPEC in blocks["run"]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    tmp = tmp_path_factory.mktemp("docker")
    started = time.monotonic()
    prebuild.wait_for_build()  # the image built in the background since the collection
    with start_engine(tmp / "dockerd.log") as engine:
        ready = cluster_in(engine, tmp)
        waited = time.monotonic() - started
        if build_image(ready):
            print(f"\nthe background build left no image (its log: {prebuild.LOG})",
                  file=sys.stderr)
        print(f"\nworker image ready in {time.monotonic() - started:.0f}s (waited "
              f"{waited:.0f}s for the background build)", file=sys.stderr)
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
            subprocess.run(["bash", "-c", ready.blocks["unpause"]], cwd=ready.work, env=ready.env,
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
