"""``lose-host:NAME`` and ``heal:NAME:after=S`` on real network-namespace hosts, without
TensorFlow and without a coordinator: the host's link inside its namespace goes down and stays
down (the host unreachable) until its heal, and whatever is still lost when the drill's job ends
is brought back, also when the job failed. Each test brings the link back itself too, so that a
failing test leaves no host down for the next."""

from __future__ import annotations

import re
import subprocess
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from launcher.drill.faults import parse_faults
from launcher.drill.host_loss import Healed, HostLosses, NamespaceHostLoss, locate_losses
from launcher.drill.injector import FaultInjector, resolve
from launcher.drill.partition import NamespaceLink, set_link
from launcher.drill.session import run_with_faults
from launcher.job.hooks import AttemptHooks
from launcher.job.tasks import TaskState
from launcher.run.events import Event
from launcher.spec.loading import spec_from_dict
from launcher.spec.model import ClusterSpec
from tests.netns.cluster import NetnsCluster, NetnsHostsFactory
from tests.support.jobs import FAKE_TRAINER, REPO, running

pytestmark = [pytest.mark.netns, pytest.mark.timeout(120)]

WAIT_S = 15.0


def link_is_up(link: NamespaceLink) -> bool:
    shown = subprocess.run(["ip", "-n", link.namespace, "-o", "link", "show", link.device],
                           capture_output=True, text=True, check=True, timeout=10).stdout
    flags = re.search(r"<([^>]*)>", shown)
    return flags is not None and "UP" in flags.group(1).split(",")


def spec_of(cluster: NetnsCluster) -> ClusterSpec:
    return spec_from_dict(cluster.spec_dict(entrypoint={"script": "train.py"}))


def h2_link(cluster: NetnsCluster) -> NamespaceLink:
    """Where lose-host:h2 takes h2 away: the link inside h2's namespace."""
    found = locate_losses(spec_of(cluster), parse_faults(["lose-host:h2"], "f", "t"))["h2"]
    assert isinstance(found, NamespaceHostLoss)
    assert found.link.namespace == cluster["h2"].namespace
    return found.link


@pytest.fixture
def cluster(netns_hosts: NetnsHostsFactory) -> Iterator[NetnsCluster]:
    """Two namespace hosts; h2's namespace-side link is brought up after the test whatever
    happened (the fixture's own reset only knows the root-side end)."""
    hosts = netns_hosts(2)
    link = h2_link(hosts)
    try:
        yield hosts
    finally:
        set_link(link, up=True)


def wait_healed(losses: HostLosses) -> Healed:
    deadline = time.monotonic() + WAIT_S
    done = threading.Event()
    while time.monotonic() < deadline:
        if found := losses.healed():
            healed, = found
            return healed
        done.wait(0.02)
    raise AssertionError("h2 was not healed in time")


def test_a_lost_host_stays_unreachable_until_its_heal(cluster: NetnsCluster) -> None:
    victim = cluster["h2"]
    faults = parse_faults(["lose-host:h2:after=0", "heal:h2:after=1"], "f", "t")
    link = h2_link(cluster)
    losses = HostLosses(locate_losses(spec_of(cluster), faults))
    try:
        assert losses.lose("h2") == f"{victim.namespace}/{link.device} down until healed"
        assert not link_is_up(link)
        assert not victim.reachable(timeout=1.0)
        assert cluster["h1"].reachable(timeout=5.0)  # the others are not hurt
        losses.heal_after("h2", 1.0)
        assert not link_is_up(link)  # down until the heal is due
        healed = wait_healed(losses)
        assert (healed.host, healed.ok) == ("h2", True)
        assert healed.detail == f"{victim.namespace}/{link.device} up"
        assert link_is_up(link)
        victim.wait_reachable(WAIT_S)
    finally:
        assert losses.restore_all() == []
    assert link_is_up(link)


@dataclass
class Control:
    """The attempt a drill's job would run, scripted: one attempt, every task running."""

    tasks: dict[str, Any]
    attempt: int = 0
    started_at: float = field(default_factory=time.time)
    first_progress_at: float | None = None
    events: list[Event] = field(default_factory=list)

    def signal_task(self, task: str, sig: Any) -> str | None:
        return None

    def emit(self, event: Event) -> None:
        self.events.append(event)

    def warn(self, text: str) -> None:
        pass


@dataclass
class Running:
    state: TaskState = TaskState.RUNNING


def test_a_host_still_lost_when_the_job_fails_is_brought_back(cluster: NetnsCluster,
                                                              tmp_path: Path) -> None:
    spec = spec_of(cluster)
    slots = {str(s.task): s.host for s in spec.task_slots()}
    planned = resolve(parse_faults(["lose-host:h2:after=0"], "f", "t"), slots, 0)
    link = h2_link(cluster)
    seen: dict[str, Any] = {}

    def failing_job(_spec: ClusterSpec, _run_dir: Path, hooks: AttemptHooks | None) -> int:
        assert isinstance(hooks, FaultInjector)
        control = Control({task: Running() for task in slots})
        hooks.on_tick(control, time.time())
        seen["events"] = [e.record() for e in control.events]
        seen["down"] = not link_is_up(link)
        raise RuntimeError("the job broke")

    with pytest.raises(RuntimeError, match="the job broke"):
        run_with_faults(spec, tmp_path / "run", planned, failing_job)
    assert seen["down"]
    lost, = seen["events"]
    assert (lost["fault"], lost["action"], lost["host"]) == ("lose-host:h2:after=0", "lose-host",
                                                            "h2")
    assert link_is_up(link)  # the drill gave it back
    cluster["h2"].wait_reachable(WAIT_S)


def test_losing_a_host_that_is_not_a_namespace_is_refused_before_anything_runs(
        tmp_path: Path) -> None:
    spec = tmp_path / "spec.yaml"
    spec.write_text(
        "name: p\n"
        f"entrypoint: {{script: {FAKE_TRAINER}}}\n"
        "hosts: {far: {address: 198.19.255.254}}\n"
        "tasks: [{type: worker, host: far, port: 23456}]\n")
    with running(["drill", str(spec), "--fault", "lose-host:far:after=5", "--fault",
                  "heal:far:after=10"], tmp_path / "run", REPO) as job:
        assert job.wait(30) == 1
    assert job.stderr.splitlines() == [
        "tfcluster: lose-host:far: no network namespace here holds 198.19.255.254; lose-host "
        "works on network-namespace hosts (e.g. tests/netns) and on the nodes of the Slurm "
        "allocation a Slurm spec runs on"]
    assert not (tmp_path / "run").exists()

