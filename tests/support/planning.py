"""Planners and plans as the tests build them: a spec whose tasks name their hosts, placed as the
local and SSH engines place it (``launcher.plan.placement.named_placement``)."""

from __future__ import annotations

from typing import Any

from launcher.plan.placement import LOCAL_ADDRESS, REMOTE_PYTHON, named_placement
from launcher.plan.planner import LaunchPlan, Planner, plan
from launcher.spec.loading import spec_from_dict
from launcher.spec.model import ClusterSpec
from worker.wire.tfconfig import TaskId

#: The local interpreter and the run directory of the plans :func:`make_plan` makes.
PY = "/opt/venv/bin/python"
RUN_DIR = "/runs/digits-1"


def named_planner(spec: ClusterSpec, run_dir: str = "", *, local_python: str = REMOTE_PYTHON,
                  base_dir: str = ".", local_address: str = LOCAL_ADDRESS) -> Planner:
    def place(placed: ClusterSpec, _history: object) -> object:
        return named_placement(placed, local_python=local_python, local_address=local_address)

    return Planner(spec, place, run_dir=run_dir, base_dir=base_dir)  # type: ignore[arg-type]


def make_spec(*groups: dict[str, Any], **fields: Any) -> ClusterSpec:
    data: dict[str, Any] = {
        "name": "digits",
        "entrypoint": {"module": "train", "args": ["--steps", "5"]},
        "tasks": list(groups) or [{"type": "worker", "count": 2}],
    }
    data.update(fields)
    return spec_from_dict(data)


def ports_to_allocate(spec: ClusterSpec) -> list[TaskId]:
    return named_placement(spec, local_python=PY).ports_to_allocate


def allocated(spec: ClusterSpec, first: int = 21000) -> dict[TaskId, int]:
    """What the coordinator does: consecutive fake ports for every task that needs one."""
    return {task: first + i for i, task in enumerate(ports_to_allocate(spec))}


def make_plan(spec: ClusterSpec, base_dir: str = "/base", **kwargs: Any) -> LaunchPlan:
    kwargs.setdefault("ports", allocated(spec))
    kwargs.setdefault("attempt", 0)
    placement = named_placement(spec, local_python=PY,
                                local_address=kwargs.pop("local_address", "localhost"))
    return plan(spec, placement, run_dir=RUN_DIR, base_dir=base_dir, **kwargs)


def by_task(launch_plan: LaunchPlan) -> dict[str, Any]:
    return {str(t.task): t for t in launch_plan.tasks}
