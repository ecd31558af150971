"""A real Slurm test cluster on this machine: a private munged, one slurmctld and one slurmd per
node, all from Debian's slurm-wlm, with a generated ``slurm.conf`` in a temp dir.

The nodes are several slurmd daemons on this one host (``slurmd -N NAME``, each with its own port
and spool dir, all at NodeAddr 127.0.0.1): Debian's 22.05 build allows multiple slurmd daemons on
one host, so no network namespace is needed. Every process of the cluster, and every job step,
carries ``TFC_SLURM_TEST=<token>`` in its environment; :meth:`SlurmCluster.stop` ends the daemons
it started by pid and then kills whatever still carries the token (slurmstepd, agents, tasks), so
nothing is left behind even when a test failed.

Below the cluster, the helpers the Slurm tests share: a spec of the fake trainer on the
allocation, the CLI's argv, waiting for what a job writes, its events of one kind, the agent on a
node and the state of a batch job.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil
import yaml

from tests.support import procs
from tests.support.jobs import FAKE_TRAINER, Event

TOKEN_VAR = "TFC_SLURM_TEST"
DAEMONS = ("munged", "slurmctld", "slurmd")
READY_TIMEOUT_S = 30.0
PARTITION = "debug"


class SlurmUnavailable(Exception):
    pass


def require_slurm() -> None:
    missing = [d for d in DAEMONS if shutil.which(d) is None]
    missing += [c for c in ("srun", "sbatch", "scontrol", "sinfo") if shutil.which(c) is None]
    if missing:
        raise SlurmUnavailable(f"Slurm is not installed (missing {', '.join(missing)}): "
                               "make sysdeps installs slurmctld slurmd slurm-client munge")
    if os.geteuid() != 0:
        raise SlurmUnavailable("the Slurm test cluster runs its daemons as root")


def _free_ports(count: int) -> list[int]:
    sockets, ports = [], []
    for _ in range(count):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        sockets.append(s)
        ports.append(s.getsockname()[1])
    for s in sockets:
        s.close()
    return ports


def _conf(root: Path, nodes: Sequence[str], ports: Sequence[int]) -> str:
    ctld, slurmd_port, *node_ports = ports
    lines = [
        "ClusterName=tfctest", f"SlurmctldHost={socket.gethostname()}(127.0.0.1)",
        f"SlurmctldPort={ctld}", f"SlurmdPort={slurmd_port}",
        "AuthType=auth/munge", f"AuthInfo=socket={root}/munge/socket,cred_expire=5", "CredType=cred/munge",
        "SlurmUser=root", "SlurmdUser=root",
        f"StateSaveLocation={root}/state", f"SlurmdSpoolDir={root}/spool/%n",
        f"SlurmctldPidFile={root}/slurmctld.pid", f"SlurmdPidFile={root}/slurmd-%n.pid",
        f"SlurmctldLogFile={root}/log/slurmctld.log", f"SlurmdLogFile={root}/log/slurmd-%n.log",
        "ProctrackType=proctrack/linuxproc", "TaskPlugin=task/none",
        "SelectType=select/cons_tres", "SelectTypeParameters=CR_CPU", "MpiDefault=none",
        "JobAcctGatherType=jobacct_gather/none", "AccountingStorageType=accounting_storage/none",
        "ReturnToService=2", "SlurmdTimeout=30", "InactiveLimit=0", "KillWait=5",
        "MinJobAge=300", "SchedulerType=sched/backfill", "JobRequeue=1",
        "SchedulerParameters=sched_interval=1,bf_interval=1",
    ]
    for name, port in zip(nodes, node_ports, strict=True):
        lines.append(f"NodeName={name} NodeHostname={socket.gethostname()} NodeAddr=127.0.0.1 "
                     f"CPUs=2 Port={port} State=UNKNOWN")
    lines.append(f"PartitionName={PARTITION} Nodes={','.join(nodes)} Default=YES "
                 "MaxTime=INFINITE State=UP OverSubscribe=FORCE:4")
    return "\n".join(lines) + "\n"


@dataclass
class SlurmCluster:
    root: Path
    nodes: tuple[str, ...]
    token: str
    env: dict[str, str]
    daemons: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)

    # --- start / stop --------------------------------------------------------------------------

    def _spawn(self, name: str, argv: list[str]) -> None:
        log = (self.root / "log" / f"{name}.out").open("ab")
        self.daemons[name] = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log,
                                              stderr=log, env=self.env, start_new_session=True)
        log.close()

    def start(self) -> None:
        munge = self.root / "munge"
        key = munge / "key"
        key.write_bytes(os.urandom(1024))
        key.chmod(0o400)
        self._spawn("munged", ["munged", "-F", "-f", f"--socket={munge}/socket",
                               f"--key-file={key}", f"--pid-file={munge}/pid",
                               f"--log-file={munge}/log", f"--seed-file={munge}/seed"])
        self._wait((munge / "socket").exists, "munged to open its socket")
        conf = str(self.root / "slurm.conf")
        self._spawn("slurmctld", ["slurmctld", "-D", "-i", "-f", conf])
        for node in self.nodes:
            self._spawn(f"slurmd-{node}", ["slurmd", "-D", "-f", conf, "-N", node])
        self._wait(self._all_idle, "every node to be idle")

    def _wait(self, ready: Callable[[], bool], what: str) -> None:
        deadline = time.monotonic() + READY_TIMEOUT_S
        while not ready():
            for name, proc in self.daemons.items():
                if proc.poll() is not None:
                    raise RuntimeError(f"{name} exited with {proc.returncode} while waiting for "
                                       f"{what}; see {self.root}/log")
            if time.monotonic() > deadline:
                raise RuntimeError(f"timed out waiting for {what}; see {self.root}/log")
            time.sleep(0.2)  # polling a daemon's state; nothing to wait on

    def _all_idle(self) -> bool:
        done = subprocess.run(["sinfo", "-h", "-N", "-o", "%N %t"], env=self.env,
                              capture_output=True, text=True, check=False)
        states = dict(line.split() for line in done.stdout.splitlines() if line.strip())
        return all(states.get(n) == "idle" for n in self.nodes)

    def leftovers(self) -> list[object]:
        return [p for p in procs.with_env(TOKEN_VAR, self.token)
                if p.pid not in {d.pid for d in self.daemons.values()}]

    def cancel_all(self, timeout_s: float = 20.0) -> None:
        """Cancel every job and wait until no job step process is left."""
        self.run(["scancel", "--full", "--user=root"], check=False)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if not self.jobs() and not self.leftovers():
                return
            time.sleep(0.2)

    def jobs(self) -> list[str]:
        done = self.run(["squeue", "-h", "-o", "%i %T"], check=False)
        return [line for line in done.stdout.splitlines()
                if line.strip() and "COMPLETED" not in line]

    def stop(self) -> None:
        with contextlib.suppress(Exception):
            self.cancel_all(10.0)
        for proc in self.daemons.values():
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
        for proc in self.daemons.values():
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(5)
        for left in procs.with_env(TOKEN_VAR, self.token):
            with contextlib.suppress(Exception):
                left.kill()
        shutil.rmtree(self.root, ignore_errors=True)

    # --- using it ------------------------------------------------------------------------------

    def run(self, argv: Sequence[str], *, check: bool = True, timeout: float = 60.0,
            env: Mapping[str, str] | None = None,
            cwd: str | Path | None = None) -> subprocess.CompletedProcess[str]:
        return subprocess.run(list(argv), env={**self.env, **(env or {})}, capture_output=True,
                              text=True, check=check, timeout=timeout, cwd=cwd)

    def idle(self) -> bool:
        return self._all_idle()


def create_cluster(nodes: int = 4) -> SlurmCluster:
    require_slurm()
    root = Path(tempfile.mkdtemp(prefix="tfc-slurm-"))
    for sub in ("munge", "state", "log", "spool"):
        (root / sub).mkdir()
    (root / "munge").chmod(0o700)
    names = tuple(f"n{i}" for i in range(1, nodes + 1))
    for name in names:
        (root / "spool" / name).mkdir()
    (root / "slurm.conf").write_text(_conf(root, names, _free_ports(2 + nodes)))
    token = uuid.uuid4().hex
    env = {**os.environ, "SLURM_CONF": str(root / "slurm.conf"), TOKEN_VAR: token}
    for var in [v for v in env if v.startswith("SLURM_") and v != "SLURM_CONF"]:
        env.pop(var)
    cluster = SlurmCluster(root, names, token, env)
    try:
        cluster.start()
    except BaseException:
        cluster.stop()
        raise
    return cluster


# --- what the tests run on it --------------------------------------------------------------------


def spec_file(directory: Path, name: str, *, args: list[str], slurm: dict[str, Any] | None = None,
              workers: int = 2, placement: dict[str, Any] | None = None, **fields: Any) -> Path:
    """A spec on the allocation's nodes; ``slurm``: fields under the old names (``slurm:``),
    else ``placement`` (``placement:``, the fields' names now)."""
    spec: dict[str, Any] = {
        "name": name,
        "entrypoint": {"script": str(FAKE_TRAINER), "args": args},
        "tasks": [{"type": "chief"}, {"type": "worker", "count": workers}],
        "restart": {"max_restarts": 1, "backoff_s": 0.1},
        "health": {"grace_period_s": 3, "heartbeat_timeout_s": 10},
        **({"slurm": {"port": 24600, **slurm}} if slurm is not None else
           {"slurm": {}, "placement": {"port": 24600, "wait_for_hosts_s": 0,
                                       **(placement or {})}}),
        **fields,
    }
    path = directory / f"{name}.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


def tfcluster(*args: str) -> list[str]:
    return [sys.executable, "-m", "launcher", *args]


def wait_for(what: str, probe: Callable[[], Any], timeout: float = 40.0) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = probe()
        if found:
            return found
        time.sleep(0.1)  # polling files another process writes
    raise AssertionError(f"timed out waiting for {what}")


def of(events: list[Event], kind: str) -> list[Event]:
    return [e for e in events if e["event"] == kind]


def _agent_on(slurm: SlurmCluster, node: str) -> psutil.Process | None:
    for proc in procs.with_env(TOKEN_VAR, slurm.token):
        try:
            if "worker.agent" in proc.cmdline() and proc.environ().get("SLURMD_NODENAME") == node:
                return proc
        except psutil.Error:
            continue
    return None


def _job_state(slurm: SlurmCluster, job_id: str) -> str:
    done = slurm.run(["scontrol", "show", "job", "-o", job_id], check=False)
    for item in done.stdout.split():
        if item.startswith("JobState="):
            return item.split("=", 1)[1]
    return ""
