"""Jobs of ``tests/integration/health_task.py`` (no TensorFlow: steps, a slowed task, growing
memory) for the per-task health tests."""

from __future__ import annotations

from typing import Any

from tests.support.jobs import REPO

TASK = REPO / "tests" / "integration" / "health_task.py"


def health_spec(name: str, args: list[str], **health: Any) -> dict[str, Any]:
    """Three workers of the health task with ``args``; ``health`` fields on top of a 3 s grace."""
    return {"name": name, "entrypoint": {"script": str(TASK), "args": args},
            "tasks": [{"type": "worker", "count": 3}],
            "restart": {"max_restarts": 0, "backoff_s": 0.1},
            "health": {"grace_period_s": 3, **health}}
