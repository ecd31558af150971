"""``tfcluster plan``: a LaunchPlan as text for people or as JSON for machines (secrets masked)."""

from __future__ import annotations

import json
import shlex
from typing import Any

from launcher.plan.planner import LaunchPlan
from launcher.plan.secrets import masked
from worker import env

_SHOWN_APART = {env.TF_CONFIG}


def plan_json(launch_plan: LaunchPlan) -> str:
    data: dict[str, Any] = launch_plan.to_dict()
    for task in data["tasks"]:
        task["env"] = masked(task["env"])
    return json.dumps(data, indent=2)


def plan_text(launch_plan: LaunchPlan) -> str:
    tasks = launch_plan.tasks
    lines = [
        f"job {launch_plan.job}: attempt {launch_plan.attempt}, {len(tasks)} task(s) on "
        f"{len(launch_plan.hosts)} host(s)",
        f"cluster: {json.dumps(dict(launch_plan.cluster))}",
        f"checkpoint dir (chief): {launch_plan.checkpoint_dir or '-'}",
    ]
    if launch_plan.resume is not None:
        lines.append(f"resume: {launch_plan.resume.checkpoint} (step {launch_plan.resume.step})")
    for host in launch_plan.hosts:
        where = "local" if host.local else f"ssh {host.user + '@' if host.user else ''}" \
                                           f"{host.address}:{host.ssh_port}"
        lines.append("")
        lines.append(f"host {host.name} ({where}), agent: {host.python} -m worker.agent")
        for task in host.tasks:
            port = f"port {task.port}" if task.port is not None else "no port (evaluator)"
            lines.append(f"  {task.task}  {port}  cwd {task.cwd}")
            lines.append(f"    argv: {shlex.join(task.argv)}")
            lines.append(f"    TF_CONFIG: {task.env[env.TF_CONFIG]}")
            shown = masked({k: v for k, v in task.env.items() if k not in _SHOWN_APART})
            for name, value in sorted(shown.items()):
                lines.append(f"    {name}={value}")
    return "\n".join(lines)
