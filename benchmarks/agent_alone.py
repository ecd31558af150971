"""The launch of ``tfcluster local -n N`` with the coordinator taken away: only the host's agent.

``python -m worker.agent`` is started the way tfcluster starts a local agent, and the very
``Launch`` message that ``tfcluster local -n N -- <python> -c <stamp> <file>`` would send it (built
by this checkout's own spec loading and planner) is written to its stdin at once. The figure is
the latest task's stamp minus the time just before the agent's ``Popen``: what the agent costs by
itself (its interpreter start, imports, and per task ``setpriv``, pipes, process table and
reports), so that ``tfcluster to all running - agent alone`` is the coordinator's share of the
launch overhead.

It is always this checkout's agent and planner (with this interpreter), whatever ``--tfcluster``
names. The agent carries the benchmark's marker, and so do its tasks.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import IO, Any

from common import REPO, BenchmarkError, Tfcluster

#: How long one agent-alone run may take before it is killed.
RUN_TIMEOUT_S = 180.0
_EXITED = b'"type":"exited"'


def launch_line(n: int, argv: list[str], run_dir: Path) -> bytes:
    """The ``Launch`` that ``tfcluster local -n N --run-dir RUN_DIR -- ARGV`` sends its agent, as
    the JSON line on the wire (ports allocated now and released at once, as in ``tfcluster plan``)."""
    from launcher.cli.compose import planner_for
    from launcher.cli.parser import build_parser
    from launcher.cli.verbs import local_spec_data
    from launcher.plan.ports import PortAllocator
    from launcher.spec.loading import spec_from_dict

    args = build_parser().parse_args(["local", "-n", str(n), "--quiet", "--run-dir",
                                      str(run_dir), "--", *argv])
    spec = spec_from_dict(local_spec_data(args), source="benchmark: agent alone")
    planner = planner_for(spec, str(run_dir))
    with PortAllocator() as allocator:
        wanted = planner.ports_to_allocate
        plan = planner.plan(0, dict(zip(wanted, allocator.allocate(len(wanted)), strict=True)))
    (host,) = plan.hosts
    return plan.launch_message(host).encode()


def agent_alone(cli: Tfcluster, n: int, argv: list[str], work: Path) -> tuple[float, float]:
    """Run the agent with the launch of N tasks of ``argv``; returns ``time.time()`` just before
    its ``Popen`` and when it had reported every task's exit. BenchmarkError if a task failed,
    or the run took longer than :data:`RUN_TIMEOUT_S` (the agent is killed; its tasks die with
    it)."""
    run_dir = work / "run"
    (run_dir / "agents").mkdir(parents=True)
    line = launch_line(n, argv, run_dir)
    from launcher.backends.early_agent import AGENT_ENV_EXTRA
    from worker.env import without_own

    agent = [sys.executable, "-m", "worker.agent"]
    env = {**without_own(cli.environ()), **AGENT_ENV_EXTRA}  # as tfcluster's agent_popen
    cli.commands.record(agent, note=f"agent alone: the launch of `tfcluster local -n {n}` "
                                    "on its stdin")
    log_path = work / "agent.log"
    with log_path.open("wb") as log:
        started = time.time()
        proc = subprocess.Popen(agent, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log,
                                cwd=REPO, env=env, start_new_session=True)
    watchdog = threading.Timer(RUN_TIMEOUT_S, proc.kill)
    watchdog.start()
    try:
        assert proc.stdin is not None and proc.stdout is not None  # PIPE
        proc.stdin.write(line)
        proc.stdin.flush()
        exits = _exits(proc.stdout, n)
        done = time.time()
        proc.stdin.close()  # EOF: the agent ends, having nothing left to stop
        proc.wait(timeout=30)
    finally:
        watchdog.cancel()
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    if len(exits) < n:
        said = log_path.read_text(encoding="utf-8", errors="replace").strip().splitlines()
        raise BenchmarkError(f"agent alone N={n}: {len(exits)} of {n} task(s) reported an exit "
                             f"(agent exit code {proc.returncode}"
                             f"{'; its log ends: ' + said[-1] if said else ''})")
    failed = [e for e in exits if e.get("exit_code") != 0]
    if failed:
        first = failed[0]
        how = f"signal {first['signal']}" if first.get("signal") else f"exit {first['exit_code']}"
        why = f": {first['error']}" if first.get("error") else ""
        raise BenchmarkError(f"agent alone N={n}: {len(failed)} task(s) failed, "
                             f"{first['task']} with {how}{why}")
    return started, done


def _exits(stdout: IO[bytes], n: int) -> list[dict[str, Any]]:
    """The agent's first N ``exited`` messages (fewer if its stdout ends first)."""
    exits: list[dict[str, Any]] = []
    for line in stdout:
        if _EXITED in line:
            exits.append(json.loads(line))
            if len(exits) == n:
                break
    return exits

