"""The launch of ``tfcluster local -n N`` taken apart: the agent alone, and the least coordinator.

- **The agent alone.** ``python -m worker.agent`` is started the way tfcluster starts a local
  agent, and the very ``Launch`` message that ``tfcluster local -n N -- <python> -c <stamp>
  <file>`` would send it (built by this checkout's own spec loading and planner) is written to
  its stdin at once. No coordinator runs. The figure is the latest task's stamp minus the time
  just before the agent's ``Popen``: what the agent costs by itself (its interpreter start,
  imports, and per task ``setpriv``, pipes, process table and reports). So ``tfcluster to all
  running - agent alone`` is the coordinator's share of the launch overhead.
- **The least coordinator** (``least_coordinator.py``): a process that does only what a
  coordinator must do before the first task runs. It starts the agent, parses the command line,
  validates the spec, plans and sends the launch. It is timed from its ``Popen`` to the latest
  stamp, like tfcluster. Its ratio to the bare loop is a floor for tfcluster's.

Both are always this checkout's agent and planner (with this interpreter), whatever
``--tfcluster`` names. The agent carries the benchmark's marker, and so do its tasks.
"""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from pathlib import Path

from common import REPO, RUN_TIMEOUT_S, BenchmarkError, Tfcluster
from least_coordinator import check_exits, launch_line, read_exits

LEAST_COORDINATOR = Path(__file__).resolve().with_name("least_coordinator.py")


def agent_alone(cli: Tfcluster, n: int, argv: list[str], work: Path) -> tuple[float, float]:
    """Run the agent with the launch of N tasks of ``argv``; returns ``time.time()`` just before
    its ``Popen`` and when it had reported every task's exit. BenchmarkError if a task failed,
    or the run took longer than :data:`RUN_TIMEOUT_S` (the agent is killed; its tasks die with
    it)."""
    run_dir = work / "run"
    (run_dir / "agents").mkdir(parents=True)
    line = launch_line(n, argv, run_dir)
    from launcher.backends.early_agent import AGENT_ENV_EXTRA
    from worker.wire.env import without_own
    from worker.wire.module_start import agent_argv

    agent = agent_argv(sys.executable)  # as every engine starts it
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
        exits = read_exits(proc.stdout, n)
        done = time.time()
        proc.stdin.close()  # EOF: the agent ends, having nothing left to stop
        proc.wait(timeout=30)
    finally:
        watchdog.cancel()
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    problem = check_exits(exits, n)
    if problem is not None:
        said = log_path.read_text(encoding="utf-8", errors="replace").strip().splitlines()
        raise BenchmarkError(f"agent alone N={n}: {problem} (agent exit code {proc.returncode}"
                             f"{'; its log ends: ' + said[-1] if said else ''})")
    return started, done


def least_coordinator(cli: Tfcluster, n: int, argv: list[str], work: Path) -> tuple[float, float]:
    """Run ``least_coordinator.py`` for N tasks of ``argv``; returns ``time.time()`` just before
    its ``Popen`` and when it exited. BenchmarkError if it failed or took longer than
    :data:`RUN_TIMEOUT_S` (it is killed; its agent sees EOF and its tasks die with the agent)."""
    command = [sys.executable, str(LEAST_COORDINATOR), str(work / "run"), str(n), "--", *argv]
    cli.commands.record(command, note=f"the least coordinator of `tfcluster local -n {n}`")
    started = time.time()
    try:
        done = subprocess.run(command, cwd=REPO, env=cli.environ(), capture_output=True,
                              text=True, timeout=RUN_TIMEOUT_S, check=False)
    except subprocess.TimeoutExpired:
        raise BenchmarkError(f"least coordinator N={n}: did not finish in "
                             f"{RUN_TIMEOUT_S:.0f}s") from None
    ended = time.time()
    if done.returncode != 0:
        said = done.stderr.strip().splitlines()
        raise BenchmarkError(f"least coordinator N={n}: exit {done.returncode}"
                             f"{': ' + said[-1] if said else ''}")
    return started, ended
