"""The engines the contract runs over, each as a :class:`~tests.contract.harness.Rig`: the fake
engine in its simulated world, this machine, the test sshd (with a task on this machine too: the
SSH engine runs a mixed job's local hosts through the local transport), and an allocation of
two nodes of the Slurm test cluster."""

from __future__ import annotations

import queue
import random
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil
import pytest

from launcher.backends.base import AgentClosed, AgentEvent, AgentMessage
from launcher.backends.engine import Backend
from launcher.backends.local.transport import LocalAgentHandle
from launcher.plan.ports import port_is_free
from launcher.spec.model import ClusterSpec
from tests.contract.harness import LINE, Job, Program, Rig
from tests.slurm.cluster import TOKEN_VAR, SlurmCluster
from tests.ssh.remote import SSH_HOST, SSH_MARK_VAR, SshSetup, ssh_host_entry
from tests.ssh.sshd import free_port
from tests.support.fake_backend import FakeAgent, FakeBackend, FakeWorld, SimClock, SimInbox, TaskScript
from tests.support.jobs import REPO


class FakeRig(Rig):
    """The fake engine: two hosts that exist only in the simulation; a test's waits move its
    clock (see :class:`~tests.support.fake_backend.SimInbox`)."""

    name = "fake"

    def __init__(self, tmp_path: Path) -> None:
        super().__init__(tmp_path)
        self.clock = SimClock()
        self.inbox = SimInbox(self.clock)
        self.world = FakeWorld(self.clock, inbox_for=lambda: self.inbox)

    def spec(self, program: Program) -> ClusterSpec:
        script = TaskScript(steps=0, exit_code=0 if program is Program.PRINT else None,
                            stdout=(LINE,))
        self.world.scripts = lambda _attempt, _task: script
        return super().spec(program)

    def spec_fields(self) -> dict[str, Any]:
        return {"tasks": [{"type": "chief", "host": "node-a", "port": 2222},
                          {"type": "worker", "host": "node-b", "port": 2222}],
                "hosts": {"node-a": {"address": "10.0.0.1"}, "node-b": {"address": "10.0.0.2"}}}

    def make_backend(self, spec: ClusterSpec) -> Backend:
        return FakeBackend(self.world, python=sys.executable)

    def wait(self, done: Callable[[list[AgentEvent]], bool], timeout_s: float) -> bool:
        """Deliver what the simulated agents say until ``done(events)``, for up to ``timeout_s``
        of simulated time."""
        end = self.clock.now + timeout_s
        while not done(self.recorder.events):
            if self.clock.now >= end:
                return False
            try:
                item = self.inbox.get(timeout=end - self.clock.now)
            except queue.Empty:
                return done(self.recorder.events)
            if isinstance(item, AgentMessage | AgentClosed):
                self.recorder(item)
        return True

    def left(self) -> list[str]:
        """The world's view: tasks still alive and agents not yet closed."""
        agents = [a for a in self._handles if isinstance(a, FakeAgent)]
        return ([f"task {task} on {a.host}" for a in agents for task in sorted(a.alive)]
                + [f"agent on {a.host}" for a in agents if not a.closed])

    def wait_none_left(self, timeout_s: float) -> list[str]:
        self.wait(lambda _events: not self.left(), timeout_s)
        return self.left()

    def lose_agents(self, job: Job) -> None:
        for handle in job.handles.values():
            assert isinstance(handle, FakeAgent)
            handle.lose()

    def cleanup(self) -> list[str]:
        super().cleanup()
        return self.left()


class LocalRig(Rig):
    """This machine: the chief and a worker, both local (one agent)."""

    name = "local"

    def spec_fields(self) -> dict[str, Any]:
        return {"tasks": [{"type": "chief"}, {"type": "worker"}], "workdir": str(self.base_dir)}

    def make_backend(self, spec: ClusterSpec) -> Backend:
        from launcher.backends import local

        return local.create(spec, self.options)


class SshRig(Rig):
    """The test sshd (the chief, over SSH) and this machine (a worker, local)."""

    name = "ssh"

    def __init__(self, tmp_path: Path, ssh: SshSetup) -> None:
        super().__init__(tmp_path)
        self.ssh = ssh

    def spec_fields(self) -> dict[str, Any]:
        ssh = self.ssh
        return {"tasks": [{"type": "chief", "host": SSH_HOST, "port": free_port()},
                          {"type": "worker"}],
                "hosts": {SSH_HOST: ssh_host_entry(ssh.sshd, ssh.key, ssh.known_hosts)},
                "python": sys.executable, "workdir": str(REPO),
                "env": {SSH_MARK_VAR: ssh.mark}}  # the ssh fixture's own check for leftovers

    def make_backend(self, spec: ClusterSpec) -> Backend:
        from launcher.backends import ssh

        return ssh.create(spec, self.options)


#: How long getting the allocation may take.
SALLOC_TIMEOUT_S = 30.0


class SlurmRig(Rig):
    """Two nodes of the Slurm test cluster, allocated for the test (``salloc --no-shell``), this
    process's environment set as inside the allocation (srun then starts steps in it)."""

    name = "slurm"

    def __init__(self, tmp_path: Path, cluster: SlurmCluster,
                 monkeypatch: pytest.MonkeyPatch) -> None:
        super().__init__(tmp_path)
        from launcher.backends.slurm.allocation import JOB_ID, NODELIST, read_allocation

        self.cluster = cluster
        done = cluster.run(["salloc", "--no-shell", "--nodes=2", "--job-name=tfc-contract"],
                           timeout=SALLOC_TIMEOUT_S)
        granted = re.search(r"Granted job allocation (\d+)", done.stderr)
        assert granted is not None, done.stderr
        self.job_id = granted.group(1)
        nodelist = cluster.run(["squeue", "-h", "-j", self.job_id, "-o", "%N"]).stdout.strip()
        inside = {JOB_ID: self.job_id, NODELIST: nodelist}
        self.allocation = read_allocation({**cluster.env, **inside})
        for name, value in {**inside, "SLURM_CONF": cluster.env["SLURM_CONF"],
                            TOKEN_VAR: cluster.token}.items():
            monkeypatch.setenv(name, value)  # srun's steps (and their tasks) carry the token
        self.port = _free_port_pair()

    def spec_fields(self) -> dict[str, Any]:
        return {"tasks": [{"type": "chief"}, {"type": "worker"}], "slurm": {"port": self.port},
                "workdir": str(self.base_dir)}

    def make_backend(self, spec: ClusterSpec) -> Backend:
        from launcher.backends.slurm.engine import SlurmBackend

        return SlurmBackend(spec, self.options, allocation=self.allocation)

    def lose_agents(self, job: Job) -> None:
        """Both ways a step is lost: the first node's agent is killed there (its step ends),
        the other node's srun here (the step's connection to the coordinator ends)."""
        first, second = job.hosts
        agent, = [a for a in self.agents(job) if a.environ().get("SLURMD_NODENAME") == first]
        agent.kill()
        srun = job.handles[second]
        assert isinstance(srun, LocalAgentHandle)
        psutil.Process(srun.pid).kill()

    def cleanup(self) -> list[str]:
        left = super().cleanup()
        self.cluster.run(["scancel", self.job_id], check=False)
        return left


def _free_port_pair() -> int:
    """A port that is free with the one after it (the Slurm spec's two tasks' ports)."""
    for _ in range(1000):
        port = random.randrange(25000, 29000)
        if port_is_free(port) and port_is_free(port + 1):
            return port
    raise AssertionError("no two free ports in a row in 25000-29000")


def make_rig(engine: str, request: pytest.FixtureRequest, tmp_path: Path,
             monkeypatch: pytest.MonkeyPatch) -> Rig:
    if engine == "fake":
        return FakeRig(tmp_path)
    if engine == "local":
        return LocalRig(tmp_path)
    if engine == "ssh":
        from tests.ssh.conftest import isolate_home

        isolate_home(tmp_path, monkeypatch)
        return SshRig(tmp_path, request.getfixturevalue("ssh"))
    if engine == "slurm":
        return SlurmRig(tmp_path, request.getfixturevalue("slurm"), monkeypatch)
    raise ValueError(f"no rig for engine {engine!r}")
