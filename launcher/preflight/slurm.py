"""Pre-flight over a Slurm allocation: can every node run its part of the job? Every node at once.

On each node of the plan, as a job step exactly where its agent would run (same srun line, same
python, same workdir), one probe checks: Python starts, ``worker`` imports, the node's task ports
are free, and the chief's checkpoint directory is the same on every node and writable: the chief's
node creates the directory and writes a marker file, then every other node must read that marker
(TensorFlow needs the chief's path visible to all of them, and tfcluster reads it from the batch
node). Findings are per node, all reported together.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import threading
import uuid
from collections.abc import Sequence
from dataclasses import dataclass

from launcher.plan.planner import HostPlan, LaunchPlan
from launcher.slurm.srun import SRUN, agent_step_argv

#: How long one node's probe may take (srun start-up plus a Python start).
PROBE_TIMEOUT_S = 60.0
MARKER_PREFIX = ".tfcluster-preflight-"

_PROBE = r"""
import json, os, socket, sys
role, directory, token, *ports = sys.argv[1:]
problems = []
try:
    import worker  # noqa: F401
except Exception as exc:
    problems.append(f"cannot import worker ({exc}): set workdir to a checkout or install it")
for port in ports:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(("", int(port)))
        except OSError as exc:
            problems.append(f"port {port} is in use ({exc.strerror})")
if directory:
    marker = os.path.join(directory, ".tfcluster-preflight-" + token)
    try:
        if role == "write":
            os.makedirs(directory, exist_ok=True)
            with open(marker, "w") as out:
                out.write(token)
        else:
            with open(marker) as seen:
                if seen.read() != token:
                    raise OSError("marker differs")
        if not os.access(directory, os.W_OK):
            problems.append(f"checkpoint dir {directory} is not writable here")
    except OSError as exc:
        what = "cannot write to" if role == "write" else "does not see the chief's marker in"
        problems.append(f"{what} the checkpoint dir {directory} ({exc}): it must be on a "
                        "filesystem every node shares")
print(json.dumps({"python": sys.version.split()[0], "problems": problems}))
"""


@dataclass(frozen=True)
class NodeReport:
    node: str
    python: str | None
    problems: tuple[str, ...]

    @property
    def ok(self) -> bool:
        return not self.problems


def _probe(host: HostPlan, launch_plan: LaunchPlan, role: str, token: str,
           srun: str) -> NodeReport:
    workdir = host.tasks[0].cwd if host.tasks else "."
    argv = agent_step_argv(host.name, job=launch_plan.job, workdir=workdir, python=host.python)
    argv[0] = srun
    argv = argv[:-2]  # not "-m worker.agent": the probe instead
    directory = launch_plan.checkpoint_dir or ""
    ports = [str(t.port) for t in host.tasks if t.port]
    argv += ["-c", _PROBE, role, directory, token, *ports]
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=PROBE_TIMEOUT_S,
                              stdin=subprocess.DEVNULL, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return NodeReport(host.name, None, (f"the probe step did not run: {exc}",))
    for line in reversed(done.stdout.splitlines()):
        try:
            found = json.loads(line)
        except ValueError:
            continue
        return NodeReport(host.name, found["python"], tuple(found["problems"]))
    tail = (done.stderr.strip().splitlines() or ["no output"])[-1]
    return NodeReport(host.name, None, (f"{host.python} did not run there (exit "
                                        f"{done.returncode}): {tail}",))


def slurm_preflight(launch_plan: LaunchPlan, srun: str = SRUN) -> list[NodeReport]:
    """One report per node, in the plan's order; the chief's node goes first (it writes)."""
    token = uuid.uuid4().hex
    chief = launch_plan.chief_host
    first = _probe(chief, launch_plan, "write", token, srun)
    others = [h for h in launch_plan.hosts if h.name != chief.name]
    reports: dict[str, NodeReport] = {chief.name: first}

    def run(host: HostPlan) -> None:
        reports[host.name] = _probe(host, launch_plan, "read", token, srun)

    threads = [threading.Thread(target=run, args=(h,), daemon=True) for h in others]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(PROBE_TIMEOUT_S + 5)
    if launch_plan.checkpoint_dir and first.ok:
        with contextlib.suppress(OSError):
            os.remove(os.path.join(launch_plan.checkpoint_dir, MARKER_PREFIX + token))
    return [reports.get(h.name, NodeReport(h.name, None, ("the probe did not finish",)))
            for h in launch_plan.hosts]


def report_lines(reports: Sequence[NodeReport]) -> list[str]:
    lines = []
    for report in reports:
        python = f"python {report.python}" if report.python else "python ?"
        status = "ok" if report.ok else "; ".join(report.problems)
        lines.append(f"{report.node}: {python}: {status}")
    return lines
