"""What ``tfcluster validate`` can tell of a spec's hosts that are this machine without running
anything: whether each one's interpreter exists, and each task's script. Remote hosts are
``tfcluster preflight``'s to check; a module is looked for by the pre-flight a run does first
(:mod:`launcher.preflight.gate`), in the tasks' interpreter."""

from __future__ import annotations

import os
import shutil

from launcher.plan.planner import LaunchPlan
from launcher.preflight.probe import python_entrypoints


def local_problems(launch_plan: LaunchPlan) -> list[str]:
    """``FIELD: what is wrong`` for each local host's missing interpreter and missing scripts."""
    problems: list[str] = []
    for host in launch_plan.hosts:
        if not host.local:
            continue
        found = shutil.which(host.python) if os.sep not in host.python else (
            host.python if os.access(host.python, os.X_OK) and os.path.isfile(host.python)
            else None)
        if found is None:
            problems.append(f"python: {host.python} is not an interpreter on this machine "
                            "(give the path of one, e.g. /usr/bin/python3)")
        cwd = host.tasks[0].cwd if host.tasks else os.getcwd()
        for entry in python_entrypoints(host):
            script, tasks = entry.get("script"), entry["tasks"]
            if isinstance(script, str) and not os.path.isfile(os.path.join(cwd, script)):
                named = ", ".join(map(str, tasks)) if isinstance(tasks, list) else ""
                problems.append(f"entrypoint.script: {script}: no such file in {cwd} ({named})")
    return problems
