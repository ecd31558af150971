"""``tfcluster plan``: a LaunchPlan as text for people or as JSON for machines.

Secrets are masked in both (env values, credentials in URLs and options of argv words:
:mod:`launcher.plan.secrets`); the text form also shows control characters escaped (``\\n``,
``\\x1b``, ``\\u202e``), so no value can break a line, recolour the terminal or reorder what is
shown. TF_CONFIG is shown as it is: it holds addresses only. Given the spec's health settings,
both also say which deadlines are in force (:func:`deadlines`)."""

from __future__ import annotations

import json
import shlex
from typing import Any

from launcher.plan.placement import SSH_PORT
from launcher.plan.planner import LaunchPlan
from launcher.plan.pool import HostPool
from launcher.plan.secrets import masked, redact_argv
from launcher.spec.health import HealthSpec
from launcher.spec.model import ClusterSpec
from worker.wire import env
from worker.wire.tfconfig import PS

_SHOWN_APART = {env.TF_CONFIG}


def deadlines(health: HealthSpec) -> dict[str, str]:
    """Which health deadlines are in force, in words: a deadline a script never opted into does
    not kill it (the start-up one unless set or once an attempt reported steps; the hang one from
    a task's first step report on)."""
    startup, hang = health.startup_timeout_s, health.hang_timeout_s
    if "startup_timeout_s" not in health.model_fields_set:
        start = (f"{startup:g}s, only once an attempt of this job has reported steps "
                 "(worker.report); set health.startup_timeout_s to enforce it from the start"
                 if startup is not None else "off")
    elif startup is None:
        start = "off (health.startup_timeout_s: null)"
    else:
        start = f"a task with no step report {startup:g}s after it started fails"
    return {
        "startup": start,
        "hang": "off (health.hang_timeout_s: null)" if hang is None else
                f"{hang:g}s without a new step, counted from a task's first step report "
                "(a script that never calls worker.report is never hung)",
        "lost_host": f"an agent silent for {health.heartbeat_timeout_s:g}s",
    }


def plan_json(launch_plan: LaunchPlan, spec: ClusterSpec | None = None) -> str:
    """``tfcluster plan --json``: the plan, with each remote host's SSH login (user, port) as the
    spec declares it and the spec's deadlines."""
    data: dict[str, Any] = launch_plan.to_dict()
    if spec is not None:
        data["deadlines"] = deadlines(spec.health)
        for host in data["hosts"]:
            declared = spec.hosts.get(host["name"])
            host["user"] = declared.user if declared is not None else None
            host["ssh_port"] = None if host["local"] else \
                declared.port if declared is not None else SSH_PORT
    for task in data["tasks"]:
        tf_config = task["env"].get(env.TF_CONFIG)
        task["env"] = masked(task["env"])
        if tf_config is not None:
            task["env"][env.TF_CONFIG] = tf_config
        task["argv"] = redact_argv(task["argv"])
    return json.dumps(data, indent=2)


def shown(text: str) -> str:
    """``text`` with every character that is not printable escaped as Python writes it."""
    if text.isprintable():
        return text
    return "".join(char if char.isprintable() else repr(char)[1:-1] for char in text)


def pool_line(pool: HostPool, launch_plan: LaunchPlan) -> str:
    """What a pool job's plan adds: the pool, the spares, how small it may run, when a host is
    left out and readmitted."""
    rules, used = pool.rules, {h.name for h in launch_plan.hosts}
    spares = [h.name for h in pool.hosts if h.name not in used]
    smallest = ("never runs smaller" if pool.min_workers == pool.max_workers else
                f"runs down to {pool.min_workers} of {pool.max_workers} workers")
    readmit = "never" if rules.readmit_after_s is None else f"after {rules.readmit_after_s:g}s"
    return (f"pool: {', '.join(h.name for h in pool.hosts)}; spares: "
            f"{', '.join(spares) or 'none'}; {smallest} (then waits "
            f"{rules.wait_for_hosts_s:g}s for hosts); a host is left out when its agent is lost "
            f"or {rules.exclude_after_failures} attempts in a row fail on it, probed again "
            f"{readmit}")


def plan_text(launch_plan: LaunchPlan, health: HealthSpec | None = None,
              pool: HostPool | None = None) -> str:
    """The plan as a person reads it (each host as its engine reaches it)."""
    tasks = launch_plan.tasks
    lines = [
        f"job {launch_plan.job}: attempt {launch_plan.attempt}, {len(tasks)} task(s) on "
        f"{len(launch_plan.hosts)} host(s)",
        f"cluster: {json.dumps(dict(launch_plan.cluster))}",
        f"checkpoint dir (chief): {shown(launch_plan.checkpoint_dir or '-')}",
    ]
    if pool is not None:
        lines.append(pool_line(pool, launch_plan))
    if PS in launch_plan.cluster:  # only a parameter_server job has parameter servers
        lines.append("strategy: parameter_server: the chief runs the entrypoint; a worker that "
                     "fails is restarted alone, a ps with the chief (from its checkpoint); the "
                     "job ends when the chief exits 0")
    if launch_plan.resume is not None:
        lines.append(f"resume: {shown(launch_plan.resume.checkpoint)} "
                     f"(step {launch_plan.resume.step})")
    if health is not None:
        lines += [f"deadline {name.replace('_', ' ')}: {text}"
                  for name, text in deadlines(health).items()]
    for host in launch_plan.hosts:
        lines.append("")
        lines.append(shown(f"host {host.name} ({host.where}), agent: {host.python} -m "
                           "worker.agent"))
        for task in host.tasks:
            port = f"port {task.port}" if task.port is not None else "no port (evaluator)"
            lines.append(f"  {task.task}  {port}  cwd {shown(task.cwd)}")
            lines.append(f"    argv: {shown(shlex.join(redact_argv(task.argv)))}")
            lines.append(f"    TF_CONFIG: {task.env[env.TF_CONFIG]}")
            visible = masked({k: v for k, v in task.env.items() if k not in _SHOWN_APART})
            for name, value in sorted(visible.items()):
                lines.append(f"    {name}={shown(value)}")
    return "\n".join(lines)
