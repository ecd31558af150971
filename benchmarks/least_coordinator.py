"""The least a coordinator must do to launch ``tfcluster local -n N``, and nothing more.

Run as ``python benchmarks/least_coordinator.py RUN_DIR N -- ARGV...``, it does what tfcluster
does before its first task runs and skips everything else. It starts the local agent first, as
tfcluster does. Then it parses the command line ``local -n N --quiet --run-dir RUN_DIR -- ARGV``
with tfcluster's parser, validates the spec that ``tfcluster local`` builds from it, and plans
attempt 0. Finally it sends the ``Launch`` to the agent and reads the agent's messages until N
tasks have exited. It has no events, run directory files, status, health checks, checkpoints or
teardown. Only the modules these steps need are imported, in the order they are needed, and the
garbage collector waits meanwhile, as in tfcluster's start-up.

The benchmark times it from its ``Popen`` to the latest task's stamp, like ``tfcluster local``.
Python's start, the spec models (pydantic), the planner, the protocol and this agent are all in
that time. So its ratio to the bare ``Popen`` loop is a floor for tfcluster's ratio, with this
spec layer and this agent on this machine.

It exits 0 when all N tasks exited 0. Otherwise it exits 1 and says why in one line on stderr.
``agent_alone.py`` uses :func:`launch_line` and :func:`check_exits` too.
"""

from __future__ import annotations

import gc
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import IO, Any, BinaryIO

_EXITED = b'"type":"exited"'


def start_agent(stderr: BinaryIO) -> subprocess.Popen[bytes]:
    """This checkout's agent, started as tfcluster starts a local one."""
    from launcher.backends.early_agent import agent_popen
    from worker.wire.module_start import agent_argv

    return agent_popen(agent_argv(sys.executable), stderr)


def launch_line(n: int, argv: list[str], run_dir: Path) -> bytes:
    """The ``Launch`` that ``tfcluster local -n N --run-dir RUN_DIR -- ARGV`` sends its agent, as
    the JSON line on the wire. Its ports are allocated now and released at once, as in
    ``tfcluster plan``. The job is placed as the local engine places it
    (``launcher.backends.local.engine.LocalBackend.place``) without building the engine, whose module
    loads the agent transports, which a launch does not need."""
    from launcher.cli.parser import build_parser
    from launcher.cli.verbs import local_spec_data
    from launcher.plan.addresses import local_task_address
    from launcher.plan.placement import named_placement
    from launcher.plan.planner import plan as make_plan
    from launcher.plan.ports import PortAllocator
    from launcher.spec.loading import spec_from_dict

    args = build_parser().parse_args(["local", "-n", str(n), "--quiet", "--run-dir",
                                      str(run_dir), "--", *argv])
    spec = spec_from_dict(local_spec_data(args), source="benchmark: least coordinator")
    placement = named_placement(spec, local_python=sys.executable,
                                local_address=local_task_address(spec))
    with PortAllocator() as allocator:
        wanted = placement.ports_to_allocate
        plan = make_plan(spec, placement, attempt=0, run_dir=str(run_dir), base_dir=os.getcwd(),
                         ports=dict(zip(wanted, allocator.allocate(len(wanted)), strict=True)))
    (host,) = plan.hosts
    return plan.launch_message(host).encode()


def read_exits(stdout: IO[bytes], n: int) -> list[dict[str, Any]]:
    """The agent's first N ``exited`` messages (fewer if its stdout ends first)."""
    exits: list[dict[str, Any]] = []
    for line in stdout:
        if _EXITED in line:
            exits.append(json.loads(line))
            if len(exits) == n:
                break
    return exits


def check_exits(exits: list[dict[str, Any]], n: int) -> str | None:
    """Why these exits are not N tasks that each exited 0, in one line; None if they are."""
    if len(exits) < n:
        return f"{len(exits)} of {n} task(s) reported an exit"
    failed = [e for e in exits if e.get("exit_code") != 0]
    if not failed:
        return None
    first = failed[0]
    how = f"signal {first['signal']}" if first.get("signal") else f"exit {first['exit_code']}"
    why = f": {first['error']}" if first.get("error") else ""
    return f"{len(failed)} task(s) failed, {first['task']} with {how}{why}"


def run(run_dir: Path, n: int, argv: list[str]) -> str | None:
    """Launch N tasks of ``argv`` and wait for their exits; why it failed, or None."""
    (run_dir / "agents").mkdir(parents=True, exist_ok=True)
    with (run_dir / "agents" / "least-coordinator.log").open("wb") as log:
        agent = start_agent(log)
    assert agent.stdin is not None and agent.stdout is not None  # PIPE
    try:
        agent.stdin.write(launch_line(n, argv, run_dir))
        agent.stdin.flush()
        problem = check_exits(read_exits(agent.stdout, n), n)
        agent.stdin.close()  # EOF: the agent ends, having nothing left to stop
        agent.wait(timeout=30)
    finally:
        if agent.poll() is None:
            agent.kill()
            agent.wait()
    return problem


def main(argv: list[str]) -> int:
    if len(argv) < 4 or argv[2] != "--" or not argv[1].isdigit():
        sys.stderr.write("usage: least_coordinator.py RUN_DIR N -- ARGV...\n")
        return 2
    gc.disable()  # as tfcluster's start-up does: it allocates much and frees almost nothing
    problem = run(Path(argv[0]), int(argv[1]), argv[3:])
    if problem is not None:
        sys.stderr.write(f"least coordinator: {problem}\n")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
