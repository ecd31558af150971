"""Planners as the tests build them: a spec whose tasks name their hosts, placed as the local
and SSH engines place it (``launcher.plan.placement.named_placement``)."""

from __future__ import annotations

from launcher.plan.placement import LOCAL_ADDRESS, REMOTE_PYTHON, named_placement
from launcher.plan.planner import Planner
from launcher.spec.model import ClusterSpec


def named_planner(spec: ClusterSpec, run_dir: str = "", *, local_python: str = REMOTE_PYTHON,
                  base_dir: str = ".", local_address: str = LOCAL_ADDRESS) -> Planner:
    def place(placed: ClusterSpec, _history: object) -> object:
        return named_placement(placed, local_python=local_python, local_address=local_address)

    return Planner(spec, place, run_dir=run_dir, base_dir=base_dir)  # type: ignore[arg-type]
